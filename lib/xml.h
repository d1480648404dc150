/*
 * xml.h: the XML request bodies S3 clients send us (CompleteMultipartUpload, DeleteObjects and
 * Put*Acl's AccessControlPolicy), read with libexpat. Pure: no backend or server types.
 * Namespaces are ignored, a <?xml?> prolog is allowed, entities &lt; &gt; &amp; &quot; &apos;
 * &#N; &#xN; are decoded; a DOCTYPE is refused. Responses are written with buf_xml*() (buf.h).
 */
#ifndef S3C_XML_H
#define S3C_XML_H

#include <stddef.h>
#include "s3c.h"

#define XML_BODY_MAX (2u << 20) /* larger request bodies are refused before parsing */
#define XML_PARTS_MAX 10000     /* part numbers 1..10000; at most that many <Part> */
#define XML_ETAG_MAX 72         /* an ETag without quotes, NUL included */

/* One <Part> of a CompleteMultipartUpload, as the client sent it. */
struct xml_part {
    unsigned number;           /* 1..XML_PARTS_MAX */
    char etag[XML_ETAG_MAX];   /* without quotes, never empty */
    char checksum_algo[8];     /* "CRC32", "CRC32C", "SHA1", "SHA256" or "" */
    char checksum[64];         /* base64 as sent, "" when none */
};

/* <CompleteMultipartUpload><Part><PartNumber>N</PartNumber><ETag>..</ETag>[<ChecksumCRC32>..]
 * </Part>...; children in either order; ETags quoted, &quot;/&#34;-quoted or bare: stored
 * without quotes. *@parts malloc'd (free()). Returns 0, -S3E_MALFORMED_XML (with detail in
 * @em), -S3E_INVALID_PART (part number outside 1..10000) or -ENOMEM. Zero parts is
 * MALFORMED_XML. */
int xml_parse_complete(const char *body, size_t len, struct xml_part **parts, size_t *n,
                       struct errmsg *em);

struct xml_delete_obj {
    char *key;        /* decoded; owned by the array */
    char *version_id; /* decoded <VersionId>, NULL when absent; owned by the array */
};
/* <Delete><Quiet>true</Quiet><Object><Key>..</Key>[<VersionId>..]</Object>...</Delete>.
 * At most 1000 objects (else MALFORMED_XML). Free with xml_delete_free(). */
int xml_parse_delete(const char *body, size_t len, int *quiet, struct xml_delete_obj **objs,
                     size_t *n, struct errmsg *em);
void xml_delete_free(struct xml_delete_obj *objs, size_t n);

/* A Put{Bucket,Object}Acl body: <AccessControlPolicy>[<Owner><ID>..</ID></Owner>]
 * <AccessControlList><Grant><Grantee><ID>|<URI>|<EmailAddress></Grantee><Permission>..
 * </Permission></Grant>...</AccessControlList></AccessControlPolicy>. Returns 0 when it grants
 * FULL_CONTROL to @owner_id and nothing else (at least one grant, the owner, if named, is
 * @owner_id), -S3E_NOT_IMPLEMENTED when it asks for any other grant or owner,
 * -S3E_MALFORMED_ACL (detail in @em) when it is not such a document, or -ENOMEM. */
int xml_parse_acl(const char *body, size_t len, const char *owner_id, struct errmsg *em);

#endif
