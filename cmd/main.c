/*
 * main.c: subcommand dispatch (serve | warm | plan | stats | flush | check | version | help),
 * nothing else.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cache/cache.h"
#include "cli.h"
#include "http/server.h"
#include "lib/conf.h"
#include "lib/log.h"
#include "ops.h"

static void usage(FILE *f)
{
    fprintf(f, "s3cached %s: an S3-compatible caching gateway for training data\n\n"
               "usage: s3cached serve [options]       run the gateway (options below)\n"
               "       s3cached stats --endpoint URL [--watch] [--interval S] [--cluster]\n"
               "       s3cached warm --endpoint URL [--pin] [--fit] s3://BUCKET/PREFIX\n"
               "                     | --keys FILE s3://BUCKET | --manifest s3://BUCKET/KEY\n"
               "       s3cached plan --endpoint URL [--keys FILE [--name NAME] s3://BUCKET\n"
               "                     | --cancel ID]   (a read plan: docs/plans.md)\n"
               "       s3cached flush --endpoint URL [s3://BUCKET/PREFIX]\n"
               "       s3cached check --endpoint URL s3://BUCKET/PREFIX --gpus N --per-gpu RATE\n"
               "                     [--sample N] [--streams N] [--readers N] [--duration DUR]\n"
               "                     [--job NAME] [--checkpoint SIZE | --params P] [--writers N]\n"
               "                     [--part-size SIZE] [--json]   (s3cached check --help)\n"
               "       (admin auth: --admin-token T or S3CACHED_ADMIN_TOKEN; or SigV4 with\n"
               "        --access-key/--secret-key or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)\n"
               "       s3cached version | help [--markdown | --man]\n\n",
            S3C_VERSION);
    conf_print_help(f);
}

static int cmd_serve(int argc, char **argv)
{
    struct conf cf;
    struct errmsg em = {{0}};
    int rc = conf_load(&cf, argc, argv, NULL, &em);
    if (!rc && ((rc = conf_check_secrets(&cf, &em)) || (rc = cache_policy_check(&cf, &em))))
        conf_free(&cf);
    if (rc) {
        fprintf(stderr, "s3cached serve: %s\n", em.buf[0] ? em.buf : "invalid configuration");
        return 2;
    }
    _Static_assert((int)CONF_LOG_ERROR == (int)S3C_LOG_ERROR &&
                       (int)CONF_LOG_DEBUG == (int)S3C_LOG_DEBUG,
                   "--log-level words in enum log_level's order");
    log_setup((enum log_level)cf.log_level, cf.log_format == CONF_LOG_JSON);
    rc = server_run(&cf, ops_handlers);
    conf_free(&cf);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "serve"))
        return cmd_serve(argc - 2, argv + 2);
    if (!strcmp(cmd, "stats") || !strcmp(cmd, "warm") || !strcmp(cmd, "flush") ||
        !strcmp(cmd, "plan"))
        return cli_main(cmd, argc - 2, argv + 2);
    if (!strcmp(cmd, "check"))
        return check_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("s3cached %s\n", S3C_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        /* --markdown, --man: the option table as docs/ holds it (make docs) */
        if (argc > 2 && !strcmp(argv[2], "--markdown"))
            conf_print_markdown(stdout);
        else if (argc > 2 && !strcmp(argv[2], "--man"))
            conf_print_man(stdout);
        else
            usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "sample-config")) {
        conf_print_sample(stdout);
        return 0;
    }
    fprintf(stderr, "s3cached: unknown command \"%s\" (try: s3cached help)\n", cmd);
    return 2;
}
