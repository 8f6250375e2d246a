/*
 * What the host saw, for the user: the device model's guest-error lines go to QEMU's
 * log under LOG_GUEST_ERROR (-d guest_errors), and its trace events, from every layer
 * (VMBus, channels, storvsp, SCSI disks, backends, the disk model), to QEMU's trace
 * backends as hvstor_* (-trace 'hvstor_*'; hw/i386/hvstor/trace-events) through the
 * model's process-wide trace hook. The model rate-limits guest errors itself. Any thread.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/log.h"
#include "hvstor-internal.h"
#include "hvstor/trace_events.h"
#include "trace.h"

static void host_guest_error(void *opaque, const char *line)
{
    qemu_log_mask(LOG_GUEST_ERROR, "%s\n", line);
    trace_hvstor_guest_error(line);
}

/*
 * One case per event of hvstor/trace_events.h, calling trace_hvstor_NAME with its
 * arguments in order: an event missing from trace-events, or declared there with
 * another number of arguments, does not compile.
 */
#define HV_ARGS_0(a)
#define HV_ARGS_1(a) a[0]
#define HV_ARGS_2(a) a[0], a[1]
#define HV_ARGS_3(a) a[0], a[1], a[2]
#define HV_ARGS_4(a) a[0], a[1], a[2], a[3]
#define HV_ARGS_5(a) a[0], a[1], a[2], a[3], a[4]
#define HV_ARGS_6(a) a[0], a[1], a[2], a[3], a[4], a[5]
#define HV_TRACE_CASE(name, nargs) \
    case HVSTOR_TRACE_##name:      \
        trace_hvstor_##name(HV_ARGS_##nargs(args)); \
        break;

static void host_trace(uint32_t event, const uint64_t *args)
{
    (void)args;
    switch (event) {
        HVSTOR_TRACE_EVENTS(HV_TRACE_CASE)
    default:
        break;
    }
}

void hv_host_log_ops(HvstorHostOps *ops)
{
    ops->guest_error = host_guest_error;
    /* Process-wide: every VMBus sets the same hook. */
    hvstor_set_trace_hook(host_trace);
}
