/*
 * The device model's trace events: one list, read by C++ (hvstor/trace.h) and by the QEMU
 * glue, which turns each into the QEMU trace event hvstor_NAME declared in
 * hw/qemu/trace-events with the same arguments, in this order (`-trace 'hvstor_*'`).
 * Every argument travels as a uint64_t. A test checks that both lists agree.
 *
 * Names are hvstor_<layer>_<what>: vmbus (the VMBus server), channel (a channel's rings),
 * storvsp (the storage protocol), scsi (the SCSI disk), backend (the storage under a disk:
 * file, ram, null, drive) and perf (the disk performance model).
 *
 * The disk id of the scsi, backend and perf events: a small number the code that assembles
 * a disk (hw/capi's DiskFactory) gives every layer of it, 1 for the first disk the process
 * builds, 2 for the next, in the order they are built (hv-disk devices in command-line
 * order, then hot-plugged ones); never reused while the process runs. The same disk has
 * the same id in all three layers, and hvstor_scsi_command names its LUN alongside. 0: a
 * disk built without an id (unit tests that build the layers by hand).
 *
 * C and C++: macros only. Includes nothing: every layer sees it.
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
    X(storvsp_reset_held, 2)    /* relid, operation: a reset left unanswered (reset=ignore) */ \
    /* disk id, lun, cdb opcode, lba (0: none), blocks (reads, writes, verify, write same) \
     * or else the transfer length in bytes: a command reaches the disk */                  \
    X(scsi_command, 5)                                                                       \
    /* disk id, cdb opcode, scsi status, sense key, asc, ascq (0, 0, 0: no sense): a       \
     * command's answer leaves the disk */                                                   \
    X(scsi_status, 6)                                                                        \
    /* op (0 read, 1 write, 2 flush, 3 discard, 4 write zeroes) as backend::Op */            \
    X(backend_submit, 4)        /* disk id, op, offset, bytes: the storage takes a request */ \
    X(backend_complete, 3)      /* disk id, op, result (0, or -errno as int64) */           \
    X(backend_error, 3)         /* disk id, op, errno: a request failed (also _complete) */ \
    /* disk id, requests: the storage's run gate (hw/capi/storage_gate.h) holds requests    \
     * that came while the VM is stopped; hands them on when it runs; cancels them (a reset \
     * or removal while stopped) */                                                          \
    X(storage_held, 2)                                                                       \
    X(storage_resumed, 2)                                                                    \
    X(storage_cancelled, 2)                                                                  \
    /* limiter: 1 the disk's IOPS cap, 2 its bandwidth cap, 3 the read or write IOPS cap, 4  \
     * the read or write bandwidth cap, 5 shared caps (a model object's or the VM's), 6      \
     * max-outstanding (ns 0: until a completion), 0 another. Times are ns of the model's   \
     * clock. */                                                                            \
    X(perf_throttled, 3)        /* disk id, limiter, ns until the held IO may go */         \
    /* disk id, IOPS credits, bytes credits: a credit bank ran dry (below one IO's worth),  \
     * or after that both banks hold 1% of their capacity again */                          \
    X(perf_burst_credits, 3)                                                                 \
    X(perf_queued, 2)           /* disk id, ns an IO waited in the model before issue */

#define HVSTOR_TRACE_ENUM(name, nargs) HVSTOR_TRACE_##name,
enum HvstorTraceEvent { HVSTOR_TRACE_EVENTS(HVSTOR_TRACE_ENUM) HVSTOR_TRACE_COUNT };
#undef HVSTOR_TRACE_ENUM

/* The most arguments an event has. */
#define HVSTOR_TRACE_MAX_ARGS 6

#endif
