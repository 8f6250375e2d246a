/*
 * Settings as objects: -object hv-disk-model, hv-vm-caps and hv-fault hold what hv-disk's
 * perf=, hv-vmbus-bridge's vm-perf= and hv-disk's fault= otherwise take as text, one QOM
 * property per setting, and those properties name an object by its id instead:
 *
 *   -object hv-disk-model,id=p10,profile=premium-p10,burst=off
 *   -device hv-disk,bus=scsi0.0,lun=0,file=disk.img,perf=p10
 *
 * The settings and their descriptions come from the model (hvstor_settings_keys), so the
 * objects offer exactly what the text does; a setting written with a dot in the text
 * (latency.read) is a property with a dash (latency-read). The object composes the text
 * once, when it is created, and the model checks it then: an object with a bad setting is
 * refused at its -object. Its settings are fixed from then on.
 *
 * The disks given one hv-disk-model share its caps, as the members of a throttle group
 * share the group's (each disk still has its own caps too), and it cannot be deleted while
 * one of them exists; name= and timeline= are a disk's own and refused here. Settings are
 * applied in the model's order, the general before the specific (latency, then
 * latency.read), not in the order written. An hv-fault is copied into each disk given it,
 * and an hv-vm-caps into the bridge.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "qom/object.h"
#include "qom/object_interfaces.h"
#include "hvstor-internal.h"

#define TYPE_HV_SETTINGS "hv-settings"

typedef struct HvSettingsClass {
    ObjectClass parent_class;
    const char *kind;  /* hvstor_settings_keys' kind */
    char **names;      /* the settings as the text names them */
    guint count;
} HvSettingsClass;

typedef struct HvSettings {
    Object parent_obj;
    char **values;           /* per setting; NULL when not given */
    char *text;              /* the settings as text, once created */
    HvstorDiskModel *model;  /* hv-disk-model: the caps its disks share */
} HvSettings;

OBJECT_DECLARE_TYPE(HvSettings, HvSettingsClass, HV_SETTINGS)

static void hv_settings_get(Object *obj, Visitor *v, const char *name, void *opaque,
                            Error **errp)
{
    HvSettings *s = HV_SETTINGS(obj);
    char *value = s->values[GPOINTER_TO_UINT(opaque)];

    value = value ? value : (char *)"";
    visit_type_str(v, name, &value, errp);
}

static void hv_settings_set(Object *obj, Visitor *v, const char *name, void *opaque,
                            Error **errp)
{
    HvSettings *s = HV_SETTINGS(obj);
    guint i = GPOINTER_TO_UINT(opaque);
    char *value;

    if (s->text) {
        error_setg(errp, "%s: %s is fixed once the object exists; create another object",
                   object_get_typename(obj), name);
        return;
    }
    if (!visit_type_str(v, name, &value, errp)) {
        return;
    }
    g_free(s->values[i]);
    s->values[i] = value;
}

/* "name=value,..." in the model's names; a comma inside a model value is written ",,". */
static char *hv_settings_text(HvSettings *s, HvSettingsClass *sc, Error **errp)
{
    bool fault = !strcmp(sc->kind, "fault");
    g_autoptr(GString) text = g_string_new("");

    for (guint i = 0; i < sc->count; i++) {
        g_auto(GStrv) parts = NULL;
        g_autofree char *value = NULL;

        if (!s->values[i]) {
            continue;
        }
        if (fault && strchr(s->values[i], ',')) {
            error_setg(errp, "hv-fault: %s='%s': a fault's values have no comma",
                       sc->names[i], s->values[i]);
            return NULL;
        }
        parts = g_strsplit(s->values[i], ",", -1);
        value = g_strjoinv(",,", parts);
        g_string_append_printf(text, "%s%s=%s", text->len ? "," : "", sc->names[i], value);
    }
    return g_string_free(g_steal_pointer(&text), false);
}

static void hv_settings_complete(UserCreatable *uc, Error **errp)
{
    HvSettings *s = HV_SETTINGS(uc);
    HvSettingsClass *sc = HV_SETTINGS_GET_CLASS(uc);
    const char *type = object_get_typename(OBJECT(uc));
    g_autofree char *text = hv_settings_text(s, sc, errp);
    char *err = NULL;

    if (!text) {
        return;
    }
    /* perf=none, fault=none are text: an object of that id could never be named. */
    if (!strcmp(object_get_canonical_path_component(OBJECT(uc)), "none")) {
        error_setg(errp, "%s: the id 'none' is taken by the text forms (fault=none); "
                   "choose another", type);
        return;
    }
    if (!strcmp(sc->kind, "disk-model")) {
        s->model = hvstor_disk_model_new(text, &err);
        if (!s->model) {
            hv_model_error(errp, err, "%s", type);
            return;
        }
    } else if (!hvstor_settings_check(sc->kind, text, &err)) {
        hv_model_error(errp, err, "%s", type);
        return;
    }
    s->text = g_steal_pointer(&text);
}

/*
 * object-del: not while disks share the model's caps (a new object of that id would make a
 * second group under the same name). A fault and VM caps are copied where they are named.
 */
static bool hv_settings_can_be_deleted(UserCreatable *uc)
{
    return !hvstor_disk_model_in_use(HV_SETTINGS(uc)->model);
}

static void hv_settings_init(Object *obj)
{
    HvSettings *s = HV_SETTINGS(obj);

    s->values = g_new0(char *, HV_SETTINGS_GET_CLASS(obj)->count + 1);
}

static void hv_settings_finalize(Object *obj)
{
    HvSettings *s = HV_SETTINGS(obj);

    for (guint i = 0; i < HV_SETTINGS_GET_CLASS(obj)->count; i++) {
        g_free(s->values[i]); /* unset settings are NULL: not a NULL-ended vector */
    }
    g_free(s->values);
    g_free(s->text);
    hvstor_disk_model_free(s->model);
}

/* One property per setting the model lists for the class's kind, described as it is. */
static void hv_settings_class_init(ObjectClass *klass, void *data)
{
    HvSettingsClass *sc = HV_SETTINGS_CLASS(klass);
    char *keys;
    g_auto(GStrv) lines = NULL;
    GPtrArray *names = g_ptr_array_new();

    sc->kind = data;
    keys = hvstor_settings_keys(sc->kind);
    if (!keys) {
        g_error("hv-settings: the model lists no settings for %s", sc->kind);
    }
    lines = g_strsplit(keys, "\n", -1);
    free(keys);
    for (char **l = lines; *l && **l; l++) {
        g_auto(GStrv) kv = g_strsplit(*l, "\t", 2);
        g_autofree char *prop = g_strdelimit(g_strdup(kv[0]), ".", '-');

        object_class_property_add(klass, prop, "str", hv_settings_get, hv_settings_set, NULL,
                                  GUINT_TO_POINTER(names->len));
        object_class_property_set_description(klass, prop, kv[1] ? kv[1] : "");
        g_ptr_array_add(names, g_strdup(kv[0]));
    }
    sc->count = names->len;
    g_ptr_array_add(names, NULL);
    sc->names = (char **)g_ptr_array_free(names, false);
}

static void hv_settings_base_class_init(ObjectClass *klass, void *data)
{
    UserCreatableClass *ucc = USER_CREATABLE_CLASS(klass);

    ucc->complete = hv_settings_complete;
    ucc->can_be_deleted = hv_settings_can_be_deleted;
}

static const TypeInfo hv_settings_types[] = {
    {
        .name = TYPE_HV_SETTINGS,
        .parent = TYPE_OBJECT,
        .abstract = true,
        .class_size = sizeof(HvSettingsClass),
        .class_init = hv_settings_base_class_init,
        .instance_size = sizeof(HvSettings),
        .instance_init = hv_settings_init,
        .instance_finalize = hv_settings_finalize,
        .interfaces = (InterfaceInfo[]) {
            { TYPE_USER_CREATABLE },
            { }
        },
    },
    {
        .name = TYPE_HV_DISK_MODEL,
        .parent = TYPE_HV_SETTINGS,
        .class_init = hv_settings_class_init,
        .class_data = (void *)"disk-model",
    },
    {
        .name = TYPE_HV_VM_CAPS,
        .parent = TYPE_HV_SETTINGS,
        .class_init = hv_settings_class_init,
        .class_data = (void *)"vm-caps",
    },
    {
        .name = TYPE_HV_FAULT,
        .parent = TYPE_HV_SETTINGS,
        .class_init = hv_settings_class_init,
        .class_data = (void *)"fault",
    },
};

DEFINE_TYPES(hv_settings_types)

/* An id names an object; the text forms always hold a '=' ("none" and "" are no fault). */
static bool hv_settings_is_id(const char *value)
{
    return value && *value && !strchr(value, '=') && strcmp(value, "none");
}

const char *hv_settings_resolve(const char *type, const char *what, const char *value,
                                HvstorDiskModel **model, Error **errp)
{
    Object *obj;
    HvSettings *s;

    if (model) {
        *model = NULL;
    }
    if (!hv_settings_is_id(value)) {
        return value;
    }
    obj = object_resolve_path_component(object_get_objects_root(), value);
    if (!obj || !object_dynamic_cast(obj, type)) {
        error_setg(errp, "%s=%s: no -object %s with id '%s' (or give the settings as "
                   "NAME=VALUE,...)", what, value, type, value);
        return NULL;
    }
    s = HV_SETTINGS(obj);
    if (model && s->model) {
        *model = s->model;
        return "";
    }
    return s->text;
}
