/*
 * admin.h: the handlers of the reserved /_/ endpoints and of OPTIONS (admin/h_admin.c), which
 * cmd/ maps to their operations.
 */
#ifndef S3C_ADMIN_H
#define S3C_ADMIN_H

#include "http/req.h"

extern const struct handler h_admin, h_options;

#endif
