/*
 * conf.h: the configuration of `s3cached serve`. One table (CONF_TABLE) drives
 * the flags, the S3CACHED_* environment, the config file, `help` and the
 * commented defaults in config/s3cached.conf. Precedence: flag > environment
 * > file > default. Sizes take K M G T (powers of 1024); durations ms s m h.
 */
#ifndef S3C_CONF_H
#define S3C_CONF_H

#include <stdint.h>
#include "s3c.h"

enum conf_type {
    CONF_STR,  /* char * (owned by struct conf, NULL when unset) */
    CONF_SIZE, /* uint64_t bytes */
    CONF_DUR,  /* int64_t milliseconds; "never" = -1 where the row allows it */
    CONF_INT,  /* int64_t */
    CONF_BOOL, /* int 0/1; a bare flag means 1; values true/false/yes/no/on/off/1/0 */
    CONF_ENUM, /* int: the index of the value among the words listed in the row's hint before
                 * the first ' ' ("through|back": 0 or 1), parsed once; enum conf_* below */
};

/* X(name, type, field, default, help)
 * The default "" means unset (NULL string / 0). Keep this table in the order `help` shows. */
#define CONF_TABLE(X)                                                                                                                                                                                                                                \
    X("config", STR, config, "", "read options from this file (key = value lines)")                                                                                                                                                                  \
    X("listen", STR, listen, "127.0.0.1:9000",                                                                                                                                                                                                       \
      "ADDR:PORT where the S3 API and the admin endpoints listen")                                                                                                                                                                                   \
    X("backend", STR, backend, "",                                                                                                                                                                                                                   \
      "file:///abs/dir or http(s)://host:port (default file://$PWD/var/store)")                                                                                                                                                                      \
    X("backend-access-key", STR, backend_access_key, "",                                                                                                                                                                                             \
      "access key for signing upstream requests")                                                                                                                                                                                                    \
    X("backend-secret-key", STR, backend_secret_key, "",                                                                                                                                                                                             \
      "secret key for signing upstream requests")                                                                                                                                                                                                    \
    X("backend-region", STR, backend_region, "us-east-1", "region for signing upstream requests")                                                                                                                                                    \
    X("backend-virtual-host", BOOL, backend_virtual_host, "false",                                                                                                                                                                                   \
      "address upstream buckets as BUCKET.host (default path-style)")                                                                                                                                                                                \
    X("backend-ca-file", STR, backend_ca_file, "",                                                                                                                                                                                                   \
      "CA bundle to verify the backend's TLS certificate")                                                                                                                                                                                           \
    X("backend-insecure", BOOL, backend_insecure, "false",                                                                                                                                                                                           \
      "do NOT verify the backend's TLS certificate (testing only)")                                                                                                                                                                                  \
    X("backend-timeout", DUR, backend_timeout, "30s",                                                                                                                                                                                                \
      "connect timeout and longest stall of a backend transfer")                                                                                                                                                                                     \
    X("cache-dir", STR, cache_dir, "./var/cache",                                                                                                                                                                                                    \
      "the SSD cache: object files plus the LMDB index")                                                                                                                                                                                             \
    X("cache-size", SIZE, cache_size, "10G",                                                                                                                                                                                                         \
      "capacity; least recently used unpinned objects are evicted above it")                                                                                                                                                                         \
    X("credentials", STR, credentials, "",                                                                                                                                                                                                           \
      "client keys file: one 'ACCESS_KEY SECRET_KEY [admin] [rate=RATE] [need=RATE]' a line")                                                                                                                                                        \
    X("access-key", STR, access_key, "", "a single client access key (admin)")                                                                                                                                                                       \
    X("secret-key", STR, secret_key, "", "the secret key of --access-key")                                                                                                                                                                           \
    X("anonymous", BOOL, anonymous, "false",                                                                                                                                                                                                         \
      "accept unsigned requests (benchmarks, trusted networks)")                                                                                                                                                                                     \
    X("admin-token", STR, admin_token, "", "bearer token accepted on the /_/ admin endpoints")                                                                                                                                                       \
    X("region", STR, region, "us-east-1",                                                                                                                                                                                                            \
      "region clients sign for (reported by GetBucketLocation)")                                                                                                                                                                                     \
    X("virtual-host-domain", STR, virtual_host_domain, "",                                                                                                                                                                                           \
      "DOMAIN: Host BUCKET.DOMAIN selects BUCKET (virtual-hosted style)")                                                                                                                                                                            \
    X("write-mode", ENUM, write_mode, "through",                                                                                                                                                                                                     \
      "through|back  PUT answers after the backend write, or once durable in the cache")                                                                                                                                                             \
    X("dirty-limit", SIZE, dirty_limit, "",                                                                                                                                                                                                          \
      "write-back: most not-yet-drained bytes before writes get 503 SlowDown (default cache-size/2)")                                                                                                                                                \
    X("drain-concurrency", INT, drain_concurrency, "4",                                                                                                                                                                                              \
      "write-back: parallel uploads of dirty objects to the backend")                                                                                                                                                                                \
    X("block-size", SIZE, block_size, "8M", "cache fill granularity")                                                                                                                                                                                \
    X("readahead", SIZE, readahead, "16M", "read-ahead for sequential readers (0 = off)")                                                                                                                                                            \
    X("fetch-parallel", INT, fetch_parallel, "16",                                                                                                                                                                                                   \
      "ranged GETs in flight for one cold object read in order from an S3 backend, a block each, ahead of its readers (16 suits a cloud store that serves each connection slowly: see bench/RESULTS.md; 1 = one stream and --readahead)")            \
    X("cold-get", BOOL, cold_get, "true",                                                                                                                                                                                                            \
      "a cold GET from the start of an object on an S3 backend learns its metadata from a ranged GET of its first block, not a HEAD first: one round trip to the store, not two (false = HEAD, then GET)")                                           \
    X("fetch-connections", INT, fetch_connections, "0",                                                                                                                                                                                              \
      "ranged GETs ahead of readers in flight in all (--fetch-parallel's; 0 = 8 x cores, at least 16), halved on the backend's 503 SlowDown and grown back one at a time")                                                                           \
    X("fill-window", SIZE, fill_window, "16M",                                                                                                                                                                                                       \
      "memory of one cold fill (its share; more while the pool has room): its bytes reach its readers from there while the cache disk writes behind them (0 = off: fills go through the page cache, as always on a tmpfs or ramfs cache directory)") \
    X("fill-memory", SIZE, fill_memory, "256M",                                                                                                                                                                                                      \
      "memory of all fills' windows together; what the disk cannot take in time is served, not cached")                                                                                                                                              \
    X("miss-source", ENUM, miss_source, "auto",                                                                                                                                                                                                      \
      "auto|backend|cache  what a cold GET is sent from with a file:// backend: its file (sendfile, while the cache fills from it) or the cache as the fill lands; auto = the file when on a local disk")                                            \
    X("follow-symlinks", BOOL, follow_symlinks, "false",                                                                                                                                                                                             \
      "file:// backend: serve symlinks that lead outside the store (data sets assembled from links); off, reads stay under the store's root")                                                                                                        \
    X("revalidate-after", DUR, revalidate_after, "60s",                                                                                                                                                                                              \
      "age after which a cached entry is checked with the backend ('never' for immutable data)")                                                                                                                                                     \
    X("keep-prefix", STR, keep_prefix, "",                                                                                                                                                                                                           \
      "BUCKET[/PREFIX],...: objects under it, once cached, stay while it is read (repeated passes over a data set larger than the cache); repeatable")                                                                                               \
    X("lru-prefix", STR, lru_prefix, "",                                                                                                                                                                                                             \
      "BUCKET[/PREFIX],...: always LRU, never switched to keep automatically; repeatable")                                                                                                                                                           \
    X("keep-auto", BOOL, keep_auto, "true",                                                                                                                                                                                                          \
      "switch a prefix to keep when its misses are re-reads of objects LRU evicted")                                                                                                                                                                 \
    X("keep-idle", DUR, keep_idle, "15m",                                                                                                                                                                                                            \
      "a keep prefix not read for this long protects nothing (and an automatic one is LRU again)")                                                                                                                                                   \
    X("warm-concurrency", INT, warm_concurrency, "4", "parallel fetches of a warm job")                                                                                                                                                              \
    X("plan-requests", INT, plan_requests, "128",                                                                                                                                                                                                    \
      "prefetches of read plans in flight, all plans together, on their own threads (0: no plans)")                                                                                                                                                  \
    X("plan-ahead", SIZE, plan_ahead, "1G",                                                                                                                                                                                                          \
      "bytes a read plan prefetches ahead of its reader (within its share of the cache)")                                                                                                                                                            \
    X("plan-idle", DUR, plan_idle, "10m",                                                                                                                                                                                                            \
      "a read plan whose reader made no planned GET for this long is dropped")                                                                                                                                                                       \
    X("client-rate-limit", SIZE, client_rate_limit, "",                                                                                                                                                                                              \
      "per-key bandwidth limit in bytes/s (K M G suffixes), 0 = none")                                                                                                                                                                               \
    X("max-bandwidth", SIZE, max_bandwidth, "",                                                                                                                                                                                                      \
      "total download bandwidth in bytes/s, shared equally among active clients when reached (0 = none)")                                                                                                                                            \
    X("accounting", BOOL, accounting, "true",                                                                                                                                                                                                        \
      "count bytes and requests per client and bucket (/_/stats, /_/metrics)")                                                                                                                                                                       \
    X("stall-accounting", BOOL, stall_accounting, "true",                                                                                                                                                                                            \
      "per client and per job (x-s3cached-job): where GETs wait (backend, fill, rate limit, queue), delivered vs needed, a verdict")                                                                                                                 \
    X("peers", STR, peers, "",                                                                                                                                                                                                                       \
      "the gateways acting as one cache: the balancer's server lines, comma-separated ('10.0.0.5:9000,10.0.0.6:9000 weight=2'), or dns:NAME:PORT (every address of NAME, re-resolved every 10 s); empty = a gateway alone")                          \
    X("self", STR, self, "",                                                                                                                                                                                                                         \
      "this gateway's entry in --peers, as the balancer names it (HOST:PORT; with dns: its ADDR:PORT)")                                                                                                                                              \
    X("peer-secret", STR, peer_secret, "",                                                                                                                                                                                                           \
      "secret the gateways sign their requests to each other with (default: --admin-token)")                                                                                                                                                         \
    X("peer-timeout", DUR, peer_timeout, "5s",                                                                                                                                                                                                       \
      "connect timeout of a request to a peer, and the longest a control request (write notice, warm share, stats) or a write waits for the peers")                                                                                                  \
    X("tls-cert", STR, tls_cert, "", "PEM certificate: serve HTTPS")                                                                                                                                                                                 \
    X("tls-key", STR, tls_key, "", "PEM private key of --tls-cert")                                                                                                                                                                                  \
    X("peer-ca", STR, peer_ca, "",                                                                                                                                                                                                                   \
      "cluster mode with --tls-cert: PEM CA bundle the peers' certificates are verified with (default: the system's store)")                                                                                                                         \
    X("threads", INT, threads, "0", "HTTP worker threads (0 = one per core)")                                                                                                                                                                        \
    X("workers", INT, workers, "0",                                                                                                                                                                                                                  \
      "background I/O threads for backend and disk work (0 = 4 x cores + 4)")                                                                                                                                                                        \
    X("max-connections", INT, max_connections, "4096", "most concurrent client connections")                                                                                                                                                         \
    X("idle-timeout", DUR, idle_timeout, "120s",                                                                                                                                                                                                     \
      "close a connection idle (or stalled mid-request) this long")                                                                                                                                                                                  \
    X("max-header-size", SIZE, max_header_size, "16K",                                                                                                                                                                                               \
      "largest request line plus headers (S3 allows 8 KB)")                                                                                                                                                                                          \
    X("max-object-size", SIZE, max_object_size, "5T",                                                                                                                                                                                                \
      "largest object a PUT or Complete may create")                                                                                                                                                                                                 \
    X("batch-max-items", INT, batch_max_items, "10000",                                                                                                                                                                                              \
      "most items one batch request (POST ?batch) may name")                                                                                                                                                                                         \
    X("batch-max-body", SIZE, batch_max_body, "4M", "largest body of a batch request")                                                                                                                                                               \
    X("shutdown-timeout", DUR, shutdown_timeout, "10s",                                                                                                                                                                                              \
      "on SIGTERM, how long in-flight requests may take to finish")                                                                                                                                                                                  \
    X("park-warn", DUR, park_warn, "60s",                                                                                                                                                                                                            \
      "count (/_/stats, /_/metrics) and name in the log each request parked longer than this: waiting for a job, the cache, a peer, a rate limit or a flush (0 = off)")                                                                              \
    X("log-level", ENUM, log_level, "info", "error|warn|info|debug")                                                                                                                                                                                 \
    X("log-format", ENUM, log_format, "text", "text|json")

/* The ENUM rows' values, in the order of the words of their rows (checked by test_conf). */
enum conf_write_mode { CONF_WRITE_THROUGH = 0, CONF_WRITE_BACK }; /* through|back */
enum conf_miss_source {
    CONF_MISS_AUTO = 0,
    CONF_MISS_BACKEND,
    CONF_MISS_CACHE
}; /* auto|backend|cache */
enum conf_log_level { CONF_LOG_ERROR = 0, CONF_LOG_WARN, CONF_LOG_INFO, CONF_LOG_DEBUG };
enum conf_log_format { CONF_LOG_TEXT = 0, CONF_LOG_JSON }; /* text|json */

struct conf {
#define CONF_FIELD_STR char *
#define CONF_FIELD_SIZE uint64_t
#define CONF_FIELD_DUR int64_t
#define CONF_FIELD_INT int64_t
#define CONF_FIELD_BOOL int
#define CONF_FIELD_ENUM int
#define X(name, type, field, def, help) CONF_FIELD_##type field;
    CONF_TABLE(X)
#undef X
    /* Derived by conf_finish(): */
    int revalidate_never; /* --revalidate-after never */
    char listen_host[64];
    int listen_port;
    char source[32]; /* internal: where the last parsed value came from */
};

/* Parsers: return NULL on success or a static error string (Varnish VNUM style). */
const char *conf_parse_size(const char *s, uint64_t *out);
const char *conf_parse_duration_ms(const char *s, int64_t *out); /* "never" is an error here */
const char *conf_parse_bool(const char *s, int *out);
/* A rate in bytes/s ("2.8G", "600M/s", "2.8e9"): fractions allowed, K M G T powers of 1024
 * as for sizes, an exponent for decimal figures. */
const char *conf_parse_rate(const char *s, uint64_t *out);

/* Fills @cf from defaults, then the file (--config / S3CACHED_CONFIG), then the environment
 * (@envp, NULL = environ), then @argv (flags after the subcommand: "--name value",
 * "--name=value", bare "--flag" for BOOL). Returns 0 or -EINVAL with a one-line message naming
 * the source, option, value and a hint in @em. Fills the derived fields. */
int conf_load(struct conf *cf, int argc, char **argv, char **envp, struct errmsg *em);
void conf_free(struct conf *cf);
/* NULL, or which shipped placeholder @value is: the stand-in secrets of deploy/ ("replace-with-*"
 * of k8s/secret.yaml and systemd/s3cached.env, "replace-me", the keys of the secrets/ .example files),
 * which anyone can read. @value may be NULL. */
const char *conf_placeholder(const char *value);
/* `serve` refuses to start on a placeholder (conf_placeholder()) in --admin-token,
 * --peer-secret, --secret-key, --backend-access-key or --backend-secret-key: 0, or -EINVAL
 * with the option and what to do in @em. */
int conf_check_secrets(const struct conf *cf, struct errmsg *em);
/* Writes the option table for `help` (flag, default, meaning) to @out. */
void conf_print_help(void *file /* FILE * */);
/* Writes config/s3cached.conf's text (every option commented with its default). */
void conf_print_sample(void *file /* FILE * */);
/* Writes the option table as docs/configuration.md holds it between its GENERATED markers
 * (`s3cached help --markdown`, make docs; test_conf checks the committed page). */
void conf_print_markdown(void *file /* FILE * */);
/* Writes the options as docs/s3cached.1 holds them between its GENERATED markers (roff .TP
 * paragraphs; `s3cached help --man`). */
void conf_print_man(void *file /* FILE * */);

#endif
