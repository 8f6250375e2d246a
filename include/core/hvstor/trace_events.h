/*
 * The device model's trace events: one list, read by C++ (hvstor/trace.h) and by the QEMU
 * glue, which turns each into the QEMU trace event hvstor_NAME declared in
 * hw/qemu/trace-events with the same arguments, in this order (`-trace 'hvstor_*'`).
 * Every argument travels as a uint64_t. A test checks that both lists agree.
 *
 * C and C++: macros only.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef HVSTOR_TRACE_EVENTS_H
#define HVSTOR_TRACE_EVENTS_H

/* X(name, number of arguments): arguments in the comment. */
#define HVSTOR_TRACE_EVENTS(X)                                                               \
    X(vmbus_msg_in, 3)          /* vp, message type, bytes */                               \
    X(vmbus_msg_out, 3)         /* vp, message type, bytes */                               \
    X(vmbus_connect, 3)         /* version, target vp, message sint */                      \
    X(vmbus_unload, 0)                                                                       \
    X(vmbus_reset, 0)                                                                        \
    X(vmbus_gpadl_create, 3)    /* child relid, gpadl, pages */                             \
    X(vmbus_gpadl_teardown, 2)  /* child relid, gpadl */                                    \
    X(vmbus_offer, 2)           /* relid, subchannel index (0: a primary) */                \
    X(vmbus_rescind, 1)         /* relid */                                                  \
    X(vmbus_open, 4)            /* relid, ring gpadl, outgoing ring page offset, target vp */ \
    X(vmbus_open_result, 2)     /* relid, status (0: opened) */                             \
    X(vmbus_close, 1)           /* relid */                                                  \
    X(vmbus_target_vp, 2)       /* relid, vp */                                              \
    X(channel_ring_full, 3)     /* relid, bytes wanted, bytes free */                       \
    X(channel_stopped, 1)       /* relid: its ring was corrupt */                           \
    X(storvsp_control, 3)       /* relid, operation, status answered */                     \
    X(storvsp_subchannels, 2)   /* asked for, offered */                                    \
    X(storvsp_srb_submit, 5)    /* relid, transaction id, lun, cdb opcode, bytes */         \
    X(storvsp_srb_complete, 5)  /* relid, transaction id, srb status, scsi status, bytes */ \
    X(storvsp_srb_busy, 2)      /* relid, outstanding: the ring is left unread */           \
    X(storvsp_enumerate, 1)     /* relid: the guest is told to rescan */                    \
    X(storvsp_remove_device, 1) /* relid: REMOVE_DEVICE sent (hv-storvsc notify=) */         \
    X(storvsp_reset_held, 2)    /* relid, operation: a reset left unanswered (reset=ignore) */

#define HVSTOR_TRACE_ENUM(name, nargs) HVSTOR_TRACE_##name,
enum HvstorTraceEvent { HVSTOR_TRACE_EVENTS(HVSTOR_TRACE_ENUM) HVSTOR_TRACE_COUNT };
#undef HVSTOR_TRACE_ENUM

/* The most arguments an event has. */
#define HVSTOR_TRACE_MAX_ARGS 5

#endif
