/*
 * What every device of the glue shares: property descriptions for -device X,help and
 * device-list-properties, and errors from the model turned into QEMU's.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qom/object.h"
#include "qobject/qobject.h"
#include "qobject/qjson.h"
#include "qapi/visitor.h"
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

void hv_visit_stats(Visitor *v, const char *name, char *json, const char *what, Error **errp)
{
    QObject *obj;
    Error *local = NULL;

    if (!json) {
        error_setg(errp, "%s: statistics unavailable", what);
        return;
    }
    obj = qobject_from_json(json, &local);
    free(json);
    if (!obj) {
        /* The model writes finite numbers and escaped strings only: a bug of ours. */
        error_propagate_prepend(errp, local, "%s: statistics: ", what);
        return;
    }
    visit_type_any(v, name, &obj, errp);
    qobject_unref(obj);
}
