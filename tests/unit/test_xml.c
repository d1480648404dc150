/*
 * test_xml.c: the XML reader against the bodies real clients send (CLIENTS.md),
 * malformed documents, entity decoding, the 1000-object DeleteObjects limit, and what the
 * reader refuses of expat's XML (DOCTYPE and entity declarations, external entities, deep
 * nesting, long text, bad UTF-8).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <expat.h>

#include "lib/s3c.h"
#include "lib/s3err.h"
#include "lib/buf.h"
#include "lib/xml.h"

#define E1 "0cc175b9c0f1b6a831c399e269772661"
#define E2 "92eb5ffee6ae2fec3ad71c777531578f"

struct want_part {
    unsigned number;
    const char *etag;
    const char *algo, *sum;
};

static void check_complete(const char *body, const struct want_part *want, size_t nwant)
{
    struct xml_part *parts = NULL;
    size_t n = 99;
    struct errmsg em = { "" };
    int rc = xml_parse_complete(body, strlen(body), &parts, &n, &em);
    if (rc != 0)
        fail_msg("rc %d (%s) for %s", rc, em.buf, body);
    assert_int_equal(n, nwant);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(parts[i].number, want[i].number);
        assert_string_equal(parts[i].etag, want[i].etag);
        assert_string_equal(parts[i].checksum_algo, want[i].algo ? want[i].algo : "");
        assert_string_equal(parts[i].checksum, want[i].sum ? want[i].sum : "");
    }
    free(parts);
}

static void test_xml_complete_clients(void **state)
{
    static const struct want_part two[] = { { 1, E1, NULL, NULL }, { 2, E2, NULL, NULL } };
    (void)state;
    /* awscli 2: xmlns, quoted ETag first, no prolog */
    check_complete("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                   "<Part><ETag>\"" E1 "\"</ETag><PartNumber>1</PartNumber></Part>"
                   "<Part><ETag>\"" E2 "\"</ETag><PartNumber>2</PartNumber></Part>"
                   "</CompleteMultipartUpload>",
                   two, 2);
    /* s3cmd: unquoted ETags, no xmlns, whitespace */
    check_complete("<CompleteMultipartUpload>\n"
                   "  <Part><PartNumber>1</PartNumber><ETag>" E1 "</ETag></Part>\n"
                   "  <Part><PartNumber>2</PartNumber><ETag>" E2 "</ETag></Part>\n"
                   "</CompleteMultipartUpload>\n",
                   two, 2);
    /* JS SDK v3: prolog, &quot;, checksums */
    {
        static const struct want_part w[] = { { 1, E1, "CRC32", "AAAAAA==" },
                                              { 2, E2, "CRC32", "i9aeUg==" } };
        check_complete("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
                       "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                       "<Part><ChecksumCRC32>AAAAAA==</ChecksumCRC32><ETag>&quot;" E1
                       "&quot;</ETag><PartNumber>1</PartNumber></Part>"
                       "<Part><ChecksumCRC32>i9aeUg==</ChecksumCRC32><ETag>&quot;" E2
                       "&quot;</ETag><PartNumber>2</PartNumber></Part>"
                       "</CompleteMultipartUpload>",
                       w, 2);
    }
    /* rclone: &#34; and varying order */
    check_complete("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                   "<Part><ETag>&#34;" E1 "&#34;</ETag><PartNumber>1</PartNumber></Part>"
                   "<Part><PartNumber>2</PartNumber><ETag>&#34;" E2 "&#34;</ETag></Part>"
                   "</CompleteMultipartUpload>",
                   two, 2);
    /* multipart ETag, other checksums, prefixes, comments, CDATA, BOM, unknown elements */
    {
        static const struct want_part w[] = { { 3, E1 "-2", "SHA256", "x/y+z=" },
                                              { 7, E2, "CRC32C", "abc=" },
                                              { 9, E2, "SHA1", "q==" } };
        check_complete("\xef\xbb\xbf<?xml version='1.0'?>\r\n<!-- hi -->"
                       "<s3:CompleteMultipartUpload xmlns:s3='http://s3.amazonaws.com/doc/2006-03-01/'>"
                       "<s3:Part><s3:PartNumber> 3 </s3:PartNumber>"
                       "<s3:ETag>&#x22;" E1 "-2&#x22;</s3:ETag>"
                       "<s3:ChecksumSHA256>x/y+z=</s3:ChecksumSHA256></s3:Part>"
                       "<Part><!-- c --><PartNumber>007</PartNumber><ETag><![CDATA[\"" E2
                       "\"]]></ETag><ChecksumCRC32C>abc=</ChecksumCRC32C>"
                       "<Size>5</Size><Future><a><b/></a></Future></Part>"
                       "<Part><PartNumber>9</PartNumber><ETag>" E2 "</ETag>"
                       "<ChecksumSHA1>q==</ChecksumSHA1><ChecksumCRC64NVME>zz</ChecksumCRC64NVME></Part>"
                       "<Extra/>"
                       "</s3:CompleteMultipartUpload><!-- bye -->  \n",
                       w, 3);
    }
}

static void test_xml_complete_malformed(void **state)
{
    static const struct {
        const char *body;
        int rc;
        const char *detail; /* substring of the errmsg */
    } cases[] = {
        { "", -S3E_MALFORMED_XML, "empty document" },
        { "   \n", -S3E_MALFORMED_XML, "empty document" },
        { "hello", -S3E_MALFORMED_XML, "expected <CompleteMultipartUpload>" },
        { "<Delete></Delete>", -S3E_MALFORMED_XML, "root element is <Delete>" },
        { "<CompleteMultipartUpload></CompleteMultipartUpload>", -S3E_MALFORMED_XML, "no <Part>" },
        { "<CompleteMultipartUpload/>", -S3E_MALFORMED_XML, "no <Part>" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>",
          -S3E_MALFORMED_XML, "unterminated <CompleteMultipartUpload>" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</Etag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "mismatched tag" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Parts>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "mismatched tag" },
        { "<CompleteMultipartUpload>junk<Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "unexpected text" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload>trailing", -S3E_MALFORMED_XML, "after the root" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload><CompleteMultipartUpload/>", -S3E_MALFORMED_XML,
          "after the root" },
        { "<CompleteMultipartUpload><Part><ETag>x</ETag></Part></CompleteMultipartUpload>",
          -S3E_MALFORMED_XML, "without <PartNumber>" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "without <ETag>" },
        { "<CompleteMultipartUpload><Part/></CompleteMultipartUpload>", -S3E_MALFORMED_XML,
          "without <PartNumber>" },
        { "<CompleteMultipartUpload><Part><PartNumber>one</PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "not a number" },
        { "<CompleteMultipartUpload><Part><PartNumber>-1</PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "not a number" },
        { "<CompleteMultipartUpload><Part><PartNumber>1 2</PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "not a number" },
        { "<CompleteMultipartUpload><Part><PartNumber></PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "empty <PartNumber>" },
        { "<CompleteMultipartUpload><Part><PartNumber>0</PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_INVALID_PART, "outside" },
        { "<CompleteMultipartUpload><Part><PartNumber>10001</PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_INVALID_PART, "outside" },
        { "<CompleteMultipartUpload><Part><PartNumber>99999999999999999999999</PartNumber>"
          "<ETag>x</ETag></Part></CompleteMultipartUpload>", -S3E_INVALID_PART, "outside" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><PartNumber>2</PartNumber>"
          "<ETag>x</ETag></Part></CompleteMultipartUpload>", -S3E_MALFORMED_XML, "duplicate" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"\"</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "empty <ETag>" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag><b>x</b></ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "unexpected element inside <ETag>" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&bogus;</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "undefined entity" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>a & b</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "not well-formed" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&#0;</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "invalid character number" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&#xD800;</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "invalid character number" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&#x110000;</ETag>"
          "</Part></CompleteMultipartUpload>", -S3E_MALFORMED_XML, "invalid character number" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&#12a;</ETag></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "not well-formed" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag>"
          "<ChecksumCRC32>a</ChecksumCRC32><ChecksumSHA1>b</ChecksumSHA1></Part>"
          "</CompleteMultipartUpload>", -S3E_MALFORMED_XML, "more than one checksum" },
        { "<!DOCTYPE x [<!ENTITY a \"b\">]><CompleteMultipartUpload/>", -S3E_MALFORMED_XML,
          "DOCTYPE" },
        { "<?xml version=\"1.0\"<CompleteMultipartUpload/>", -S3E_MALFORMED_XML,
          "expected <CompleteMultipartUpload>: unclosed token" },
        { "<CompleteMultipartUpload><!-- x </CompleteMultipartUpload>", -S3E_MALFORMED_XML,
          "unterminated <CompleteMultipartUpload> (unclosed token)" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag><![CDATA[x</ETag>"
          "</Part></CompleteMultipartUpload>", -S3E_MALFORMED_XML,
          "unterminated <ETag> (unclosed CDATA section)" },
        { "<CompleteMultipartUpload a=b><Part/></CompleteMultipartUpload>", -S3E_MALFORMED_XML,
          "not well-formed" },
        { "<CompleteMultipartUpload a><Part/></CompleteMultipartUpload>", -S3E_MALFORMED_XML,
          "not well-formed" },
        { "<CompleteMultipartUpload a=\"x\"b=\"y\"/>", -S3E_MALFORMED_XML, "not well-formed" },
        { "<CompleteMultipartUpload a=\"x", -S3E_MALFORMED_XML, "unclosed token" },
        { "<CompleteMultipartUpload", -S3E_MALFORMED_XML, "unclosed token" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></",
          -S3E_MALFORMED_XML, "unterminated <CompleteMultipartUpload>" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>"
          "</CompleteMultipartUpload", -S3E_MALFORMED_XML,
          "unterminated <CompleteMultipartUpload>" },
        { "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x",
          -S3E_MALFORMED_XML, "unterminated <ETag>" },
        { "<CompleteMultipartUpload><X><Y></X></Y></CompleteMultipartUpload>",
          -S3E_MALFORMED_XML, "mismatched tag" },
        { "<CompleteMultipartUpload><X><Y>", -S3E_MALFORMED_XML, "unterminated <Y>" },
        { "<CompleteMultipartUpload><?pi x?></CompleteMultipartUpload>", -S3E_MALFORMED_XML,
          "unexpected markup" },
        { "<1CompleteMultipartUpload/>", -S3E_MALFORMED_XML, "not well-formed" },
        { "<x:/>", -S3E_MALFORMED_XML, "empty local name" },
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct xml_part *parts = (struct xml_part *)0x1;
        size_t n = 99;
        struct errmsg em = { "" };
        int rc = xml_parse_complete(cases[i].body, strlen(cases[i].body), &parts, &n, &em);
        if (rc != cases[i].rc || !strstr(em.buf, cases[i].detail))
            fail_msg("case %zu %s: rc %d \"%s\", want %d \"%s\"", i, cases[i].body, rc, em.buf,
                     cases[i].rc, cases[i].detail);
        assert_null(parts);
        assert_int_equal(n, 0);
    }
}

static void test_xml_complete_nul_and_len(void **state)
{
    static const char body[] = "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>"
                               "<ETag>a\0b</ETag></Part></CompleteMultipartUpload>";
    struct xml_part *parts;
    size_t n;
    struct errmsg em;
    (void)state;
    assert_int_equal(xml_parse_complete(body, sizeof(body) - 1, &parts, &n, &em),
                     -S3E_MALFORMED_XML);
    assert_non_null(strstr(em.buf, "NUL"));
    /* @len bounds the document: a prefix is unterminated */
    assert_int_equal(xml_parse_complete(body, 40, &parts, &n, &em), -S3E_MALFORMED_XML);
    assert_int_equal(xml_parse_complete(NULL, 0, &parts, &n, &em), -S3E_MALFORMED_XML);
    /* over the cap */
    size_t big = XML_BODY_MAX + 1;
    char *p = malloc(big);
    assert_non_null(p);
    memset(p, ' ', big);
    assert_int_equal(xml_parse_complete(p, big, &parts, &n, &em), -S3E_MALFORMED_XML);
    assert_non_null(strstr(em.buf, "larger"));
    free(p);
}

static void test_xml_complete_deep(void **state)
{
    struct buf b;
    struct xml_part *parts;
    size_t n;
    struct errmsg em;
    (void)state;
    buf_init(&b, 1 << 20);
    buf_puts(&b, "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>");
    for (int i = 0; i < 100000; i++)
        buf_puts(&b, "<a>");
    assert_int_equal(xml_parse_complete(b.p, b.len, &parts, &n, &em), -S3E_MALFORMED_XML);
    assert_non_null(strstr(em.buf, "nested too deep"));
    buf_free(&b);
}

/* Exactly XML_DEPTH_MAX (32) open elements are read, one more is refused, wherever it is. */
static void test_xml_depth_bound(void **state)
{
    struct buf b;
    struct xml_part *parts;
    size_t n;
    struct errmsg em;
    (void)state;
    buf_init(&b, 1 << 20);
    for (int depth = 32; depth <= 33; depth++) {
        buf_reset(&b);
        /* root (1) > Part (2) > Future (3) > a ... up to @depth */
        buf_puts(&b, "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag>"
                     "<Future>");
        for (int i = 4; i <= depth; i++)
            buf_puts(&b, "<a>");
        for (int i = 4; i <= depth; i++)
            buf_puts(&b, "</a>");
        buf_puts(&b, "</Future></Part></CompleteMultipartUpload>");
        int rc = xml_parse_complete(b.p, b.len, &parts, &n, &em);
        if (depth == 32) {
            assert_int_equal(rc, 0);
            assert_int_equal(n, 1);
            free(parts);
        } else {
            assert_int_equal(rc, -S3E_MALFORMED_XML);
            assert_non_null(strstr(em.buf, "nested too deep"));
        }
    }
    buf_free(&b);
}

/* Nothing from a DTD is ever taken: internal entities (billion laughs), external ones (a
 * file, a URL), parameter entities, even an empty DOCTYPE; and no entity is known without
 * one. Each is refused before anything expands, in every reader. */
static void test_xml_doctype_refused(void **state)
{
    static const char *const docs[] = {
        /* billion laughs */
        "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">"
        "<!ENTITY lol1 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">"
        "<!ENTITY lol2 \"&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;\">"
        "<!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">"
        "<!ENTITY lol4 \"&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;\">"
        "<!ENTITY lol5 \"&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;\">"
        "<!ENTITY lol6 \"&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;\">"
        "<!ENTITY lol7 \"&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;\">"
        "<!ENTITY lol8 \"&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;\">"
        "<!ENTITY lol9 \"&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;\">]>"
        "<R><Part><PartNumber>1</PartNumber><ETag>&lol9;</ETag></Part>"
        "<Object><Key>&lol9;</Key></Object></R>",
        /* external entities (XXE) */
        "<!DOCTYPE R [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>"
        "<R><Part><PartNumber>1</PartNumber><ETag>&xxe;</ETag></Part>"
        "<Object><Key>&xxe;</Key></Object></R>",
        "<!DOCTYPE R SYSTEM \"http://127.0.0.1:1/evil.dtd\"><R/>",
        "<!DOCTYPE R [<!ENTITY % p SYSTEM \"http://127.0.0.1:1/p.dtd\"> %p;]><R/>",
        "<!DOCTYPE R><R/>",
        "\xef\xbb\xbf  <!-- c --><!DOCTYPE R []><R/>",
    };
    static const char *const roots[] = { "CompleteMultipartUpload", "Delete",
                                          "AccessControlPolicy" };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(docs); i++) {
        for (size_t r = 0; r < ARRAY_SIZE(roots); r++) {
            /* the same document under each reader's root element */
            struct buf b;
            const char *at = strstr(docs[i], "<R");
            buf_init(&b, 1 << 20);
            buf_append(&b, docs[i], (size_t)(at - docs[i]));
            for (const char *p = at; *p; p++) {
                if ((p[0] == '<' && p[1] == 'R') || (p[0] == '/' && p[1] == 'R')) {
                    buf_append(&b, p, 1);
                    buf_puts(&b, roots[r]);
                    p++;
                } else {
                    buf_append(&b, p, 1);
                }
            }
            struct errmsg em = { "" };
            struct xml_part *parts = NULL;
            struct xml_delete_obj *objs = NULL;
            size_t n = 0;
            int quiet, rc;
            if (r == 0)
                rc = xml_parse_complete(b.p, b.len, &parts, &n, &em);
            else if (r == 1)
                rc = xml_parse_delete(b.p, b.len, &quiet, &objs, &n, &em);
            else
                rc = xml_parse_acl(b.p, b.len, "s3cached", &em);
            if (rc != (r == 2 ? -S3E_MALFORMED_ACL : -S3E_MALFORMED_XML) ||
                !strstr(em.buf, "DOCTYPE not allowed"))
                fail_msg("doc %zu root %s: rc %d \"%s\"", i, roots[r], rc, em.buf);
            assert_null(parts);
            assert_null(objs);
            buf_free(&b);
        }
    }
    /* without a DOCTYPE only the five named entities exist */
    const char *undeclared = "<Delete><Object><Key>&xxe;</Key></Object></Delete>";
    struct xml_delete_obj *objs;
    size_t n;
    int quiet;
    struct errmsg em = { "" };
    assert_int_equal(xml_parse_delete(undeclared, strlen(undeclared), &quiet, &objs, &n, &em),
                     -S3E_MALFORMED_XML);
    assert_non_null(strstr(em.buf, "undefined entity"));
}

/* A leaf's text is at most 4096 bytes once decoded (a key is at most 1024); entities count
 * decoded; elements that are skipped are not read at all. */
static void test_xml_text_bound(void **state)
{
    struct buf b;
    struct xml_delete_obj *objs;
    size_t n;
    int quiet;
    struct errmsg em;
    (void)state;
    buf_init(&b, XML_BODY_MAX);
    for (int len = 4096; len <= 4097; len++) {
        buf_reset(&b);
        buf_puts(&b, "<Delete><Object><Key>");
        for (int i = 0; i < len; i++)
            buf_puts(&b, i % 2 ? "&amp;" : "k");
        buf_puts(&b, "</Key></Object></Delete>");
        int rc = xml_parse_delete(b.p, b.len, &quiet, &objs, &n, &em);
        if (len == 4096) {
            assert_int_equal(rc, 0);
            assert_int_equal(strlen(objs[0].key), 4096);
            assert_int_equal(objs[0].key[4095], '&');
            xml_delete_free(objs, n);
        } else {
            assert_int_equal(rc, -S3E_MALFORMED_XML);
            assert_non_null(strstr(em.buf, "text of <Key> longer than 4096 bytes"));
        }
    }
    /* a 1 MiB text in an element nobody reads is skipped */
    buf_reset(&b);
    buf_puts(&b, "<Delete><Object><Key>a</Key><Future>");
    for (int i = 0; i < (1 << 20); i++)
        buf_append(&b, "x", 1);
    buf_puts(&b, "</Future></Object></Delete>");
    assert_int_equal(xml_parse_delete(b.p, b.len, &quiet, &objs, &n, &em), 0);
    xml_delete_free(objs, n);
    buf_free(&b);
}

/* Bodies are UTF-8 whatever they declare; bytes that are not UTF-8, and characters XML 1.0
 * does not allow, are MalformedXML (as a conforming reader, like AWS's, answers). */
static void test_xml_encoding(void **state)
{
    struct xml_delete_obj *objs;
    size_t n;
    int quiet;
    struct errmsg em;
    (void)state;
    const char *latin = "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>"
                        "<Delete><Object><Key>caf\xc3\xa9</Key></Object></Delete>";
    assert_int_equal(xml_parse_delete(latin, strlen(latin), &quiet, &objs, &n, &em), 0);
    assert_string_equal(objs[0].key, "caf\xc3\xa9"); /* not read as Latin-1 */
    xml_delete_free(objs, n);
    /* XML's line ends: raw CR LF and CR read as LF; &#13; is a CR */
    const char *crlf = "<Delete><Object><Key>a\r\nb\rc&#13;\n</Key></Object></Delete>";
    assert_int_equal(xml_parse_delete(crlf, strlen(crlf), &quiet, &objs, &n, &em), 0);
    assert_string_equal(objs[0].key, "a\nb\nc\r\n");
    xml_delete_free(objs, n);
    static const char *const bad[] = {
        "<Delete><Object><Key>caf\xe9</Key></Object></Delete>",     /* Latin-1 byte */
        "<Delete><Object><Key>\xc0\xaf</Key></Object></Delete>",    /* overlong '/' */
        "<Delete><Object><Key>\xed\xa0\x80</Key></Object></Delete>", /* a surrogate */
        "<Delete><Object><Key>a\x01</Key></Object></Delete>",       /* a control character */
        "<Delete><Object><Key>a&#1;</Key></Object></Delete>",
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        em.buf[0] = '\0';
        if (xml_parse_delete(bad[i], strlen(bad[i]), &quiet, &objs, &n, &em) !=
            -S3E_MALFORMED_XML)
            fail_msg("accepted bad text #%zu", i);
        assert_true(em.buf[0] != '\0');
    }
}

static void test_xml_complete_many(void **state)
{
    struct buf b;
    struct xml_part *parts;
    size_t n;
    struct errmsg em;
    (void)state;
    buf_init(&b, XML_BODY_MAX);
    buf_puts(&b, "<CompleteMultipartUpload>");
    for (int i = 1; i <= XML_PARTS_MAX; i++)
        buf_printf(&b, "<Part><PartNumber>%d</PartNumber><ETag>\"%032x\"</ETag></Part>", i, i);
    size_t mark = b.len;
    buf_puts(&b, "</CompleteMultipartUpload>");
    assert_int_equal(xml_parse_complete(b.p, b.len, &parts, &n, &em), 0);
    assert_int_equal(n, XML_PARTS_MAX);
    assert_int_equal(parts[9999].number, 10000);
    assert_string_equal(parts[9999].etag, "00000000000000000000000000002710");
    free(parts);
    b.len = mark;
    buf_puts(&b, "<Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>");
    assert_int_equal(xml_parse_complete(b.p, b.len, &parts, &n, &em), -S3E_MALFORMED_XML);
    assert_non_null(strstr(em.buf, "more than 10000 parts"));
    buf_free(&b);
}

static void check_delete(const char *body, int want_quiet, const char *const *keys, size_t nk)
{
    struct xml_delete_obj *objs = NULL;
    size_t n = 99;
    int quiet = 7;
    struct errmsg em = { "" };
    int rc = xml_parse_delete(body, strlen(body), &quiet, &objs, &n, &em);
    if (rc)
        fail_msg("rc %d (%s) for %s", rc, em.buf, body);
    assert_int_equal(quiet, want_quiet);
    assert_int_equal(n, nk);
    for (size_t i = 0; i < nk; i++)
        assert_string_equal(objs[i].key, keys[i]);
    xml_delete_free(objs, n);
}

static void test_xml_delete_forms(void **state)
{
    (void)state;
    {
        static const char *const k[] = { "a.txt", "dir/b.txt" };
        /* boto3 / awscli */
        check_delete("<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                     "<Object><Key>a.txt</Key></Object><Object><Key>dir/b.txt</Key></Object>"
                     "<Quiet>true</Quiet></Delete>",
                     1, k, 2);
        /* JS SDK: prolog, Quiet first, VersionId */
        check_delete("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>false</Quiet>"
                     "<Object><Key>a.txt</Key><VersionId>null</VersionId></Object>"
                     "<Object><VersionId/><Key>dir/b.txt</Key></Object></Delete>",
                     0, k, 2);
        /* whitespace, no Quiet, extra children of Object (newer SDKs) */
        check_delete("<Delete>\n  <Object>\n    <Key>a.txt</Key>\n"
                     "    <ETag>\"x\"</ETag><Size>3</Size>\n  </Object>\n"
                     "  <Object><Key>dir/b.txt</Key></Object>\n</Delete>\n",
                     0, k, 2);
        check_delete("<Delete><Quiet> TRUE </Quiet><Object><Key>a.txt</Key></Object>"
                     "<Object><Key>dir/b.txt</Key></Object></Delete>",
                     1, k, 2);
    }
    {
        static const char *const k[] = { "a&b<c>d\"e'f", "line1\nline2\t\r", " spaced key ",
                                         "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                                         "<raw]]>&amp;" };
        check_delete("<Delete><Object><Key>a&amp;b&lt;c&gt;d&quot;e&apos;f</Key></Object>"
                     "<Object><Key>line1&#10;line2&#x9;&#13;</Key></Object>"
                     "<Object><Key> spaced key </Key></Object>"
                     "<Object><Key>caf&#233; &#x20AC; &#128512;</Key></Object>"
                     "<Object><Key><![CDATA[<raw]]>]]&gt;<![CDATA[&amp;]]></Key></Object>"
                     "</Delete>",
                     0, k, 5);
    }
}

static void test_xml_delete_malformed(void **state)
{
    static const struct {
        const char *body;
        const char *detail;
    } cases[] = {
        { "<Delete></Delete>", "no <Object>" },
        { "<Delete><Quiet>true</Quiet></Delete>", "no <Object>" },
        { "<Delete/>", "no <Object>" },
        { "<Delete><Quiet>maybe</Quiet><Object><Key>a</Key></Object></Delete>",
          "<Quiet> is not true or false" },
        { "<Delete><Quiet>true</Quiet><Quiet>true</Quiet><Object><Key>a</Key></Object></Delete>",
          "duplicate <Quiet>" },
        { "<Delete><Object></Object></Delete>", "without <Key>" },
        { "<Delete><Object/></Delete>", "without <Key>" },
        { "<Delete><Object><VersionId>1</VersionId></Object></Delete>", "without <Key>" },
        { "<Delete><Object><Key></Key></Object></Delete>", "empty <Key>" },
        { "<Delete><Object><Key/></Object></Delete>", "empty <Key>" },
        { "<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>", "duplicate <Key>" },
        { "<Delete><Object><Key>a</Key></Object>", "unterminated <Delete>" },
        { "<Delete><Object><Key>a</Object></Key></Delete>", "mismatched tag" },
        { "<Delete><Object><Key>a&#0;</Key></Object></Delete>", "invalid character number" },
        { "<CompleteMultipartUpload/>", "root element" },
        { "<Delete><Object><Key>a</Key></Object>x</Delete>", "unexpected text" },
        { "<Delete><Object>x<Key>a</Key></Object></Delete>", "unexpected text" },
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct xml_delete_obj *objs = (struct xml_delete_obj *)0x1;
        size_t n = 99;
        int quiet = 1;
        struct errmsg em = { "" };
        int rc = xml_parse_delete(cases[i].body, strlen(cases[i].body), &quiet, &objs, &n, &em);
        if (rc != -S3E_MALFORMED_XML || !strstr(em.buf, cases[i].detail))
            fail_msg("case %zu %s: rc %d \"%s\", want \"%s\"", i, cases[i].body, rc, em.buf,
                     cases[i].detail);
        assert_null(objs);
        assert_int_equal(n, 0);
        assert_int_equal(quiet, 0);
    }
}

static int build_delete(struct buf *b, int nobj)
{
    buf_reset(b);
    buf_puts(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>");
    for (int i = 0; i < nobj; i++)
        buf_printf(b, "<Object><Key>dir/key-%04d&amp;x</Key></Object>", i);
    return buf_puts(b, "</Delete>");
}

static void test_xml_delete_limits(void **state)
{
    struct buf b;
    struct xml_delete_obj *objs;
    size_t n;
    int quiet;
    struct errmsg em;
    (void)state;
    buf_init(&b, XML_BODY_MAX);
    assert_int_equal(build_delete(&b, 1000), 0);
    assert_int_equal(xml_parse_delete(b.p, b.len, &quiet, &objs, &n, &em), 0);
    assert_int_equal(n, 1000);
    assert_int_equal(quiet, 1);
    assert_string_equal(objs[0].key, "dir/key-0000&x");
    assert_string_equal(objs[999].key, "dir/key-0999&x");
    xml_delete_free(objs, n);
    assert_int_equal(build_delete(&b, 1001), 0);
    assert_int_equal(xml_parse_delete(b.p, b.len, &quiet, &objs, &n, &em), -S3E_MALFORMED_XML);
    assert_non_null(strstr(em.buf, "more than 1000 objects"));
    assert_null(objs);
    buf_free(&b);
    xml_delete_free(NULL, 0);
}

/* Every prefix of a valid document must fail cleanly (no over-read; run under valgrind). */
static void test_xml_truncations(void **state)
{
    static const char cbody[] =
        "<?xml version=\"1.0\"?><CompleteMultipartUpload xmlns=\"x\"><!-- c --><Part>"
        "<PartNumber>1</PartNumber><ETag>&quot;ab&#34;</ETag><ChecksumCRC32>x</ChecksumCRC32>"
        "<Foo><Bar a='1'/><![CDATA[z]]></Foo></Part></CompleteMultipartUpload>";
    static const char dbody[] = "<Delete><Quiet>true</Quiet><Object><Key>a&lt;<![CDATA[<]]>"
                                "</Key><VersionId>v</VersionId></Object></Delete>";
    (void)state;
    for (size_t len = 0; len < sizeof(cbody) - 1; len++) {
        char *p = malloc(len ? len : 1);
        memcpy(p, cbody, len);
        struct xml_part *parts;
        size_t n;
        assert_int_equal(xml_parse_complete(p, len, &parts, &n, NULL), -S3E_MALFORMED_XML);
        free(p);
    }
    for (size_t len = 0; len < sizeof(dbody) - 1; len++) {
        char *p = malloc(len ? len : 1);
        memcpy(p, dbody, len);
        struct xml_delete_obj *objs;
        size_t n;
        int quiet;
        assert_int_equal(xml_parse_delete(p, len, &quiet, &objs, &n, NULL), -S3E_MALFORMED_XML);
        free(p);
    }
}

/* <VersionId> is kept (DeleteObjects answers per key: "null" deletes, others are refused). */
static void test_xml_delete_version_ids(void **state)
{
    (void)state;
    const char *body = "<Delete><Object><Key>a</Key><VersionId>null</VersionId></Object>"
                       "<Object><VersionId>3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY</VersionId>"
                       "<Key>b</Key></Object><Object><Key>c</Key></Object>"
                       "<Object><Key>d</Key><VersionId/></Object></Delete>";
    struct xml_delete_obj *objs = NULL;
    size_t n = 0;
    int quiet = 0;
    struct errmsg em = { "" };
    assert_int_equal(xml_parse_delete(body, strlen(body), &quiet, &objs, &n, &em), 0);
    assert_int_equal(n, 4);
    assert_string_equal(objs[0].version_id, "null");
    assert_string_equal(objs[1].key, "b");
    assert_string_equal(objs[1].version_id, "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY");
    assert_null(objs[2].version_id);
    assert_string_equal(objs[3].version_id, "");
    xml_delete_free(objs, n);
    const char *dup = "<Delete><Object><Key>a</Key><VersionId>null</VersionId>"
                      "<VersionId>null</VersionId></Object></Delete>";
    assert_int_equal(xml_parse_delete(dup, strlen(dup), &quiet, &objs, &n, &em),
                     -S3E_MALFORMED_XML);
    const char *nokey = "<Delete><Object><VersionId>null</VersionId></Object></Delete>";
    assert_int_equal(xml_parse_delete(nokey, strlen(nokey), &quiet, &objs, &n, &em),
                     -S3E_MALFORMED_XML);
}

#define ACL_GRANTEE(inner) \
    "<Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" " \
    "xsi:type=\"CanonicalUser\">" inner "</Grantee>"
#define ACL_DOC(owner, grants) \
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<AccessControlPolicy " \
    "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">" owner \
    "<AccessControlList>" grants "</AccessControlList></AccessControlPolicy>"
#define OWNER_S3C "<Owner><ID>s3cached</ID><DisplayName>s3cached</DisplayName></Owner>"
#define GRANT(grantee, perm) "<Grant>" grantee "<Permission>" perm "</Permission></Grant>"

/* Put*Acl bodies: only "the owner has FULL_CONTROL" (what is enforced) passes; any other grant
 * or owner is NotImplemented; what is not an ACL document is MalformedACLError. */
/* What the writers write: buf_xml_text() (error documents) only XML 1.0 -- the control
 * characters XML 1.0 has no form for become U+FFFD, as does a byte that is not UTF-8 -- and
 * what it writes parses with expat; buf_xml() (keys in listings) keeps S3's &#N;. */
static void test_xml_writer(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(buf_xml_text(&b, "a\x01" "b\x1f\x08" "c\td\ne\rf<&>\"'"), 0);
    assert_string_equal(b.p, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd" "c&#9;d&#10;e&#13;f"
                             "&lt;&amp;&gt;&quot;&apos;");
    buf_reset(&b);
    /* UTF-8 kept; a stray byte, an overlong form and a surrogate replaced; DEL as &#127; */
    assert_int_equal(buf_xml_text(&b, "\xc3\xa9\xe2\x82\xac|\xff|\xc0\x80|\xed\xa0\x80|\x7f"), 0);
    assert_string_equal(b.p, "\xc3\xa9\xe2\x82\xac|\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd|"
                             "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|&#127;");
    buf_reset(&b);
    assert_int_equal(buf_xml_text_elem(&b, "Key", "k\x01"), 0);
    assert_string_equal(b.p, "<Key>k\xef\xbf\xbd</Key>");
    /* every byte value but NUL, in one element: well-formed XML 1.0 */
    char all[256];
    for (int i = 1; i < 256; i++)
        all[i - 1] = (char)i;
    all[255] = '\0';
    buf_reset(&b);
    assert_int_equal(buf_xml_text_elem(&b, "Message", all), 0);
    XML_Parser px = XML_ParserCreate("UTF-8");
    assert_non_null(px);
    if (XML_Parse(px, b.p, (int)b.len, 1) != XML_STATUS_OK)
        fail_msg("not well-formed: %s", XML_ErrorString(XML_GetErrorCode(px)));
    XML_ParserFree(px);
    /* listings keep the character reference */
    buf_reset(&b);
    assert_int_equal(buf_xml_elem(&b, "Key", "k\x01"), 0);
    assert_string_equal(b.p, "<Key>k&#1;</Key>");
    buf_free(&b);
}

static void test_xml_acl(void **state)
{
    (void)state;
    static const struct { const char *body; int rc; } cases[] = {
        /* what GetBucketAcl answers, sent back (awscli put-bucket-acl --access-control-policy) */
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<ID>s3cached</ID><DisplayName>s3cached"
                                               "</DisplayName>"), "FULL_CONTROL")), 0 },
        { ACL_DOC("", GRANT(ACL_GRANTEE("<ID> s3cached </ID>"), "FULL_CONTROL")), 0 },
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<ID>s3cached</ID>"), "FULL_CONTROL")
                  GRANT(ACL_GRANTEE("<ID>s3cached</ID>"), "FULL_CONTROL")), 0 },
        /* anything more or else than the owner's full control */
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<ID>s3cached</ID>"), "FULL_CONTROL")
                  GRANT(ACL_GRANTEE("<URI>http://acs.amazonaws.com/groups/global/AllUsers</URI>"),
                        "READ")), -S3E_NOT_IMPLEMENTED },
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<ID>someone-else</ID>"), "FULL_CONTROL")),
          -S3E_NOT_IMPLEMENTED },
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<ID>s3cached</ID>"), "READ")),
          -S3E_NOT_IMPLEMENTED },
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<EmailAddress>a@b.c</EmailAddress>"),
                                   "FULL_CONTROL")), -S3E_NOT_IMPLEMENTED },
        { ACL_DOC("<Owner><ID>other</ID></Owner>",
                  GRANT(ACL_GRANTEE("<ID>s3cached</ID>"), "FULL_CONTROL")), -S3E_NOT_IMPLEMENTED },
        { ACL_DOC(OWNER_S3C, ""), -S3E_NOT_IMPLEMENTED },
        /* not an ACL document */
        { "", -S3E_MALFORMED_ACL },
        { "<Delete><Object><Key>a</Key></Object></Delete>", -S3E_MALFORMED_ACL },
        { "<AccessControlPolicy>" OWNER_S3C "</AccessControlPolicy>", -S3E_MALFORMED_ACL },
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<ID>s3cached</ID>"), "EVERYTHING")),
          -S3E_MALFORMED_ACL },
        { ACL_DOC(OWNER_S3C, "<Grant><Permission>FULL_CONTROL</Permission></Grant>"),
          -S3E_MALFORMED_ACL },
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE(""), "FULL_CONTROL")), -S3E_MALFORMED_ACL },
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<ID>s3cached</ID><URI>x</URI>"),
                                   "FULL_CONTROL")), -S3E_MALFORMED_ACL },
        { ACL_DOC(OWNER_S3C, "<Grant>" ACL_GRANTEE("<ID>s3cached</ID>") "<Permission>"
                  "FULL_CONTROL</Permission><Permission>READ</Permission></Grant>"),
          -S3E_MALFORMED_ACL },
        { ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<ID>s3cached</ID>"), "FULL_CONTROL")) "<x/>",
          -S3E_MALFORMED_ACL },
        { "<AccessControlPolicy><AccessControlList><Grant>", -S3E_MALFORMED_ACL },
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct errmsg em = { "" };
        int rc = xml_parse_acl(cases[i].body, strlen(cases[i].body), "s3cached", &em);
        if (rc != cases[i].rc)
            fail_msg("case %zu: rc %d want %d (%s)", i, rc, cases[i].rc, em.buf);
        if (rc)
            assert_true(em.buf[0] != '\0');
    }
    /* every prefix of a valid document is refused cleanly (no over-read, no leak) */
    const char *ok = ACL_DOC(OWNER_S3C, GRANT(ACL_GRANTEE("<ID>s3cached</ID>"), "FULL_CONTROL"));
    for (size_t len = 0; len < strlen(ok); len++) {
        char *p = malloc(len ? len : 1);
        memcpy(p, ok, len);
        assert_int_equal(xml_parse_acl(p, len, "s3cached", NULL), -S3E_MALFORMED_ACL);
        free(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xml_complete_clients),
        cmocka_unit_test(test_xml_complete_malformed),
        cmocka_unit_test(test_xml_complete_nul_and_len),
        cmocka_unit_test(test_xml_complete_deep),
        cmocka_unit_test(test_xml_depth_bound),
        cmocka_unit_test(test_xml_doctype_refused),
        cmocka_unit_test(test_xml_text_bound),
        cmocka_unit_test(test_xml_encoding),
        cmocka_unit_test(test_xml_complete_many),
        cmocka_unit_test(test_xml_delete_forms),
        cmocka_unit_test(test_xml_delete_malformed),
        cmocka_unit_test(test_xml_delete_limits),
        cmocka_unit_test(test_xml_truncations),
        cmocka_unit_test(test_xml_delete_version_ids),
        cmocka_unit_test(test_xml_acl),
        cmocka_unit_test(test_xml_writer),
    };
    return cmocka_run_group_tests_name("xml", tests, NULL, NULL);
}
