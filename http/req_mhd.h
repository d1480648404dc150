/*
 * req_mhd.h: req.c's libmicrohttpd callbacks, for server.c to register (the access handler
 * and the completion notice). Only files that include <microhttpd.h> include this.
 */
#ifndef S3C_REQ_MHD_H
#define S3C_REQ_MHD_H

#include <microhttpd.h>

/* MHD_AccessHandlerCallback; @cls is the struct server. */
enum MHD_Result req_access(void *cls, struct MHD_Connection *conn, const char *url,
                           const char *method, const char *version, const char *upload_data,
                           size_t *upload_data_size, void **con_cls);
/* MHD_OPTION_NOTIFY_COMPLETED; @cls is the struct server. */
void req_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                   enum MHD_RequestTerminationCode toe);

#endif
