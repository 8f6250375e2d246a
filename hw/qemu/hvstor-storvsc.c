/*
 * hv-storvsc: a Hyper-V synthetic SCSI controller on the emulated VMBus.
 * The controller offers its primary channel on VMBus; the storage protocol
 * behind it lives in the C++ core.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/module.h"
#include "qemu/uuid.h"
#include "qapi/error.h"
#include "hw/qdev-core.h"
#include "hw/qdev-properties.h"
#include "hw/qdev-properties-system.h"
#include "hvstor-vmbus.h"

#define TYPE_HV_STORVSC "hv-storvsc"
OBJECT_DECLARE_SIMPLE_TYPE(HvStorvsc, HV_STORVSC)

struct HvStorvsc {
    DeviceState parent_obj;
    QemuUUID instance;
    uint32_t relid;
};

static unsigned controller_count;

static void hv_storvsc_realize(DeviceState *dev, Error **errp)
{
    HvStorvsc *s = HV_STORVSC(dev);
    HvstorVmbus *vb = hv_vmbus_bridge_get(errp);
    uint8_t wire[16];
    QemuUUID le;

    if (!vb) {
        return;
    }
    if (qemu_uuid_is_null(&s->instance)) {
        /* Stable per controller index, so guests see the same device each boot. */
        qemu_uuid_parse("f8b3781b-1e82-4818-a1c3-63d806ec1500", &s->instance);
        s->instance.data[15] = controller_count;
    }
    controller_count++;
    /* VMBus carries GUIDs with the first three fields little-endian. */
    le = qemu_uuid_bswap(s->instance);
    memcpy(wire, le.data, 16);
    s->relid = hvstor_vmbus_add_scsi_controller(vb, wire);
    if (!s->relid) {
        error_setg(errp, "hv-storvsc: no VMBus channel id left");
    }
}

static const Property hv_storvsc_props[] = {
    DEFINE_PROP_UUID_NODEFAULT("instance", HvStorvsc, instance),
};

static void hv_storvsc_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);

    dc->realize = hv_storvsc_realize;
    dc->desc = "Hyper-V synthetic SCSI controller (VMBus)";
    dc->user_creatable = true;
    dc->hotpluggable = false;
    device_class_set_props(dc, hv_storvsc_props);
    set_bit(DEVICE_CATEGORY_STORAGE, dc->categories);
}

static const TypeInfo hv_storvsc_info = {
    .name = TYPE_HV_STORVSC,
    .parent = TYPE_DEVICE,
    .instance_size = sizeof(HvStorvsc),
    .class_init = hv_storvsc_class_init,
};

static void hv_storvsc_register_types(void)
{
    type_register_static(&hv_storvsc_info);
}

type_init(hv_storvsc_register_types)
