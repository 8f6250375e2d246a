/*
 * What every device of the glue shares: property descriptions for -device X,help and
 * device-list-properties, and errors from the model turned into QEMU's.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qom/object.h"
#include "hvstor-internal.h"

void hv_describe_props(ObjectClass *klass, const HvPropDoc *docs)
{
    for (; docs->name; docs++) {
        /* A name no property has is a bug of ours: QEMU stops at startup. */
        object_class_property_set_description(klass, docs->name, docs->text);
    }
}

void hv_model_error(Error **errp, char *err, const char *fmt, ...)
{
    va_list ap;
    g_autofree char *what = NULL;

    va_start(ap, fmt);
    what = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    /* The model's messages are malloc()ed (hvstor/capi.h); NULL only when out of memory. */
    error_setg(errp, "%s: %s", what, err ? err : "out of memory");
    free(err);
}

void hv_model_report(bool warning, char *err, const char *fmt, ...)
{
    va_list ap;
    g_autofree char *what = NULL;

    va_start(ap, fmt);
    what = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    if (warning) {
        warn_report("%s: %s", what, err ? err : "out of memory");
    } else {
        error_report("%s: %s", what, err ? err : "out of memory");
    }
    free(err);
}
