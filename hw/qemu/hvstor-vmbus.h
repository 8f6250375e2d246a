/*
 * hv-vmbus-bridge: the machine's Hyper-V partition and VMBus server.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef HW_HVSTOR_VMBUS_H
#define HW_HVSTOR_VMBUS_H

#include "qapi/error.h"
#include "hw/qdev-core.h"
#include "hvstor/capi.h"

#define TYPE_HV_VMBUS_BRIDGE "hv-vmbus-bridge"
/* Unused by PC machines; the hypercall page traps through it. */
#define HV_VMBUS_DEFAULT_HYPERCALL_PORT 0x0b48

/* The bus on the bridge that VMBus devices plug into (their DeviceClass bus_type). */
#define TYPE_HV_VMBUS_BUS "hv-vmbus"

/*
 * The VMBus server of the bridge `bus` is on, for a device being realized there, and in
 * *index the device's number on the bus (0, 1, ... in the order they are realized): what
 * its default instance GUID is made from.
 */
HvstorVmbus *hv_vmbus_bus_vmbus(BusState *bus, unsigned *index);

#endif
