/*
 * hv-vmbus-bridge: the machine's Hyper-V partition and VMBus server.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef HW_HVSTOR_VMBUS_H
#define HW_HVSTOR_VMBUS_H

#include "qapi/error.h"
#include "hvstor/capi.h"

#define TYPE_HV_VMBUS_BRIDGE "hv-vmbus-bridge"
/* Unused by PC machines; the hypercall page traps through it. */
#define HV_VMBUS_DEFAULT_HYPERCALL_PORT 0x0b48

/* The bridge's VMBus server; creates the bridge on the ISA bus when absent. */
HvstorVmbus *hv_vmbus_bridge_get(Error **errp);

#endif
