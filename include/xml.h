/*
 * xml.h: the two XML request bodies S3 clients send us (CompleteMultipartUpload
 * and DeleteObjects), read by a small strict reader. Pure. Namespaces are
 * ignored, a <?xml?> prolog is allowed, entities &lt; &gt; &amp; &quot; &apos;
 * &#N; &#xN; are decoded. Responses are written with buf_xml*() (buf.h).
 */
#ifndef S3C_XML_H
#define S3C_XML_H

#include <stddef.h>
#include "backend.h"

#define XML_BODY_MAX (2u << 20) /* larger request bodies are refused before parsing */

/* <CompleteMultipartUpload><Part><PartNumber>N</PartNumber><ETag>..</ETag>[<ChecksumCRC32>..]
 * </Part>...; children in either order; ETags quoted, &quot;/&#34;-quoted or bare: stored
 * without quotes. *@parts malloc'd (free()). Returns 0, -S3E_MALFORMED_XML (with detail in
 * @em), -S3E_INVALID_PART (part number outside 1..10000) or -ENOMEM. Zero parts is
 * MALFORMED_XML. */
int xml_parse_complete(const char *body, size_t len, struct be_part **parts, size_t *n,
                       struct errmsg *em);

struct xml_delete_obj {
    char *key; /* decoded; owned by the array */
};
/* <Delete><Quiet>true</Quiet><Object><Key>..</Key>[<VersionId>..]</Object>...</Delete>.
 * At most 1000 objects (else MALFORMED_XML). Free with xml_delete_free(). */
int xml_parse_delete(const char *body, size_t len, int *quiet, struct xml_delete_obj **objs,
                     size_t *n, struct errmsg *em);
void xml_delete_free(struct xml_delete_obj *objs, size_t n);

#endif
