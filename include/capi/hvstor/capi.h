/*
 * The C boundary between the C++ device model and the QEMU glue.
 *
 * No C++ exception crosses it: each function catches everything and fails in its own
 * way, as documented below (NULL or false with a message; an error status; a line on
 * stderr, only the first time for a given VMBus, where there is nothing to return).
 *
 * Any function may be called from any thread while the objects it takes exist, except
 * hvstor_vmbus_free, which must not overlap any other call on that VMBus or on a
 * controller or disk it owns, and hvstor_disk_free and hvstor_disk_remove, which must
 * not overlap any other call on that disk.
 */
#ifndef HVSTOR_CAPI_H
#define HVSTOR_CAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "hvstor/trace_events.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct HvstorHostOps {
    void *opaque;
    bool (*read_gpa)(void *opaque, uint64_t gpa, void *dst, size_t len);
    bool (*write_gpa)(void *opaque, uint64_t gpa, const void *src, size_t len);
    bool (*atomic_or_u32)(void *opaque, uint64_t gpa, uint32_t mask);
    /* Host pointer to [gpa, gpa + len) within one page of guest RAM, or NULL. */
    void *(*map)(void *opaque, uint64_t gpa, size_t len, bool writable);
    void (*unmap)(void *opaque, void *ptr, size_t len, bool written);
    void (*raise_vector)(void *opaque, uint32_t vp, uint8_t vector);
    /*
     * Optional (NULL: dropped). Any thread; must not block. The guest broke the protocol:
     * one line naming the controller or bus, the channel, the field and its value (already
     * rate-limited). Trace events go to hvstor_set_trace_hook's hook instead.
     */
    void (*guest_error)(void *opaque, const char *line);
    /*
     * Optional (NULL: nothing). Called about every millisecond by a thread waiting for
     * the model's threads (hvstor_vmbus_reset waiting for channel closes): runs what of
     * the VMM's work is ready, without blocking (QEMU: the main loop's AioContext).
     */
    void (*poll_while_waiting)(void *opaque);
    /*
     * Optional (NULL: nothing). Marks [ptr, ptr + len) of a mapping still in use dirty for
     * migration, as unmap with written does. Main thread, with the VM stopped.
     */
    void (*mark_written)(void *opaque, void *ptr, size_t len);
} HvstorHostOps;

typedef enum HvstorMsrResult {
    HVSTOR_MSR_HANDLED = 0,
    HVSTOR_MSR_FAULT = 1,    /* inject #GP */
    HVSTOR_MSR_NOT_OURS = 2, /* let the CPU model handle it */
} HvstorMsrResult;

/*
 * A partition with its SynIC and VMBus server. It owns the controllers and disks
 * created on it: hvstor_vmbus_free frees them too (disks, then controllers).
 */
typedef struct HvstorVmbus HvstorVmbus;

/*
 * Hooks every thread the device model starts runs: `enter` first, `leave` last, after its
 * last call into HvstorHostOps (QEMU: rcu_register_thread and rcu_unregister_thread, since
 * the guest memory operations take the RCU read lock on these threads). Either may be
 * NULL. Call once, before the first object is created; a second call is ignored with a
 * line on stderr.
 */
void hvstor_set_thread_hooks(void (*enter)(void), void (*leave)(void));

/*
 * Where the model's trace events go, process-wide (every VMBus, controller and disk):
 * `trace` gets event `event` of enum HvstorTraceEvent with its arguments, as many as
 * hvstor/trace_events.h lists for it. Called from any thread, with the model's locks
 * possibly held: it must not block or call into this API. NULL: events are dropped (the
 * default; then an event costs one atomic load). May be called at any time, again to
 * change the hook; a thread in the middle of an event may still call the hook it replaced.
 */
void hvstor_set_trace_hook(void (*trace)(uint32_t event, const uint64_t *args));

/* Parses "5.3" style VMBus versions; false for versions this server does not speak. */
bool hvstor_parse_vmbus_version(const char *text, uint32_t *version);
/*
 * The versions this server speaks, newest first, as hvstor_parse_vmbus_version reads
 * them: "5.3 5.2 ... 2.4" (malloc'd; free() it). NULL when out of memory.
 */
char *hvstor_vmbus_versions(void);

/* NULL on failure, with a message in *err (free() it). */
HvstorVmbus *hvstor_vmbus_new(const HvstorHostOps *ops, uint32_t nr_vps,
                              uint16_t hypercall_port, uint32_t max_version,
                              char **err);
void hvstor_vmbus_free(HvstorVmbus *vb);
/* Machine reset. On an exception: logged, the reset may be partial. */
void hvstor_vmbus_reset(HvstorVmbus *vb);
/*
 * The VM's run state, from the VMM's run-state handler on its main thread. Paused (false):
 * from its return until the next resume, no thread of the model reads a ring, writes guest
 * memory or raises an interrupt. It waits for the ring rounds and SynIC deliveries already
 * in progress, which never wait for the guest (a round may wait for a file backend's
 * submission; poll_while_waiting runs meanwhile), then for the disks' storage I/O in flight
 * (not a drive='s: QEMU's vm_stop drains its block layer itself). Completions, messages and
 * event flags that come while paused are held and go out on resume (true), and so are disk
 * requests a model or a stall fault releases meanwhile: no data moves. Resets, closes and
 * disk removals work while paused (they cancel the held requests). A new VMBus starts
 * running.
 */
void hvstor_vmbus_set_running(HvstorVmbus *vb, bool running);

/*
 * Saved state for savevm and migration, from the VMM's main thread with the VM stopped:
 * the partition (synthetic MSRs, SynIC pages and queued messages), the VMBus server
 * (connection, offers and relids, GPADLs, open channels) and each controller (handshake,
 * subchannels, answers owed and requests not finished, which the loaded machine executes
 * again). One versioned stream: a build refuses a newer version. The disks' data is not in
 * it (it is the disk image's), nor a disk model's credits or a fault setting.
 * On success *data (malloc'd; free() it) and *len; false with a message in *err.
 */
bool hvstor_vmbus_save(HvstorVmbus *vb, uint8_t **data, size_t *len, char **err);
/*
 * Loads what hvstor_vmbus_save wrote, with the VM stopped and the machine just reset
 * (QEMU resets before loadvm and at an incoming migration's start); guest RAM is already
 * loaded. The reopened channels and held messages start when the VM runs. False with a
 * message in *err naming what could not be loaded; the machine is reset then.
 */
bool hvstor_vmbus_load(HvstorVmbus *vb, const uint8_t *data, size_t len, char **err);

/*
 * Rewrites the Hyper-V leaves over what the CPU model answered. On an exception:
 * logged, the registers are left as they came in.
 */
void hvstor_cpuid(HvstorVmbus *vb, uint32_t leaf, uint32_t subleaf,
                  uint32_t *eax, uint32_t *ebx, uint32_t *ecx, uint32_t *edx);
/* On an exception: logged, HVSTOR_MSR_FAULT. */
HvstorMsrResult hvstor_rdmsr(HvstorVmbus *vb, uint32_t vp, uint32_t msr, uint64_t *val);
HvstorMsrResult hvstor_wrmsr(HvstorVmbus *vb, uint32_t vp, uint32_t msr, uint64_t val);
/*
 * Returns the value for RAX. On an exception: logged, HV_STATUS_INSUFFICIENT_MEMORY
 * (0x000B), which a Linux guest retries.
 */
uint64_t hvstor_hypercall(HvstorVmbus *vb, uint32_t vp, uint64_t control,
                          uint64_t input, uint64_t output);

/* A synthetic SCSI controller: offers its primary channel at creation. */
typedef struct HvstorController HvstorController;

/*
 * An event loop of the VMM's that runs channels instead of threads of the model's own
 * (QEMU: an IOThread's AioContext). Both calls from any thread.
 * watch: from now on, call ready(arg) on the loop's thread whenever `fd` is readable (it
 *   stays readable until read); a handle for unwatch, or NULL if the loop cannot take it.
 * unwatch: return once that `ready` is not running and will not run again. Called from any
 *   thread, the loop's own included, but never from within that `ready`.
 */
typedef struct HvstorEventLoop {
    void *opaque;
    void *(*watch)(void *opaque, int fd, void (*ready)(void *arg), void *arg);
    void (*unwatch)(void *opaque, void *handle);
} HvstorEventLoop;

typedef struct HvstorControllerConfig {
    uint16_t max_subchannels;     /* subchannels the guest may ask for */
    uint32_t max_transfer_bytes;  /* largest SRB data transfer */
    uint32_t max_outstanding;     /* per channel, before back-pressure */
    const char *name;             /* names it in guest-error lines; NULL: "storvsp" */
    uint8_t worker_only;          /* 1: every ring round on the channel's worker, none on
                                     the signalling vCPU thread (inline-rounds=off) */
    /*
     * Where the channels' workers run. NULL: a thread per open channel. Else the channel
     * at place p (0: the primary, k: subchannel k; one opened while the subchannel at its
     * place still closes takes that place) turns in loops[p % nr_loops] (1 to 257 of them;
     * QEMU: one per place, from iothread= or iothread-vq-mapping=).
     * The structs are copied; each loop's opaque outlives the controller.
     */
    const HvstorEventLoop *loops;
    uint32_t nr_loops;
    /* How resets are answered, as hvstor_controller_set_reset takes it; NULL: "answer". */
    const char *reset;
    /*
     * The VMBus device class offered: "scsi" (NULL), "ide" (Generation 1's IDE accelerator:
     * no subchannels, one disk at LUN 0, its target from the instance's second group, 0000
     * or 0001) or "fc" (a Fibre Channel HBA).
     */
    const char *device_class;
    /* class "fc" only, and needed there: the WWNs FCHBA_DATA answers, 16 hex digits each. */
    const char *port_wwn;
    const char *node_wwn;
} HvstorControllerConfig;

/*
 * instance: 16 bytes in VMBus wire order. NULL on failure, message in *err (free() it).
 * The controller lives until its VMBus is freed.
 */
HvstorController *hvstor_controller_new(HvstorVmbus *vb, const uint8_t instance[16],
                                        const HvstorControllerConfig *cfg, char **err);

/* A SCSI disk on one LUN of a controller. */
typedef struct HvstorDisk HvstorDisk;

/*
 * Storage the glue provides: QEMU's block layer behind hv-disk's drive= (backend "drive").
 * The device model hands it well-formed requests only (in range, block aligned, no
 * modifying one when read_only).
 *
 * submit: from any thread (a channel worker); must not block. The glue completes every
 * request exactly once with hvstor_block_complete(token, result), from any thread,
 * possibly before submit returns.
 * drain: returns once every request submitted so far has completed (its
 * hvstor_block_complete returned); called with no submit running or to come (the disk
 * is off its LUN), from the thread that frees the disk.
 * length: the storage's length in bytes now (QEMU's block_resize changes it); called
 * from the thread that changes the disk's capacity (hvstor_disk_resize), which the disk
 * may take up to that length.
 */
typedef enum HvstorBlockOp {
    HVSTOR_BLOCK_READ = 0,
    HVSTOR_BLOCK_WRITE = 1,
    HVSTOR_BLOCK_FLUSH = 2,
    HVSTOR_BLOCK_DISCARD = 3,       /* may read back as anything */
    HVSTOR_BLOCK_WRITE_ZEROES = 4,  /* reads back as zeros */
} HvstorBlockOp;

typedef struct HvstorBlockIo {
    HvstorBlockOp op;
    bool fua;                 /* write: on stable storage before completion */
    uint64_t offset, length;  /* bytes, multiples of 512; none for a flush */
    const struct iovec *iov;  /* read, write: guest memory, `length` bytes in all; valid
                                 until the request completes */
    uint32_t iovcnt;
} HvstorBlockIo;

typedef struct HvstorBlockOps {
    void *opaque;
    uint64_t size;            /* bytes, a non-zero multiple of 512 */
    bool read_only;
    const char *name;         /* what the disk is built on, e.g. "drive:drive0 (qcow2)" */
    void (*submit)(void *opaque, const HvstorBlockIo *io, void *token);
    void (*drain)(void *opaque);
    uint64_t (*length)(void *opaque);
} HvstorBlockOps;

/* result: 0 or -errno. Exactly once per submitted request; token is invalid afterwards. */
void hvstor_block_complete(void *token, int result);

/*
 * The settings one -object takes, by kind: "disk-model" (docs/perf-model.md), "vm-caps" (the
 * VM-level subset of those) or "fault" (docs/fault-injection.md). One line per setting,
 * "NAME\tMEANING", in the order the model documents them (malloc'd; free() it); NULL for
 * another kind or when out of memory.
 */
char *hvstor_settings_keys(const char *kind);
/*
 * Checks `text` as settings of `kind` ("disk-model", "vm-caps" or "fault"), in the forms the
 * string properties take (perf=, vm-perf=, fault=). False with a message in *err (free() it)
 * naming the setting and what it wants.
 */
bool hvstor_settings_check(const char *kind, const char *text, char **err);

/*
 * A disk model several disks may share (-object hv-disk-model): each disk given it is
 * modelled with its settings, and the disks together pass its caps as well as their own,
 * as the members of a QEMU throttle group share the group's limits. One model object per
 * disk gives each disk its own caps only.
 */
typedef struct HvstorDiskModel HvstorDiskModel;
/*
 * From perf= settings text. NULL with a message in *err (free() it) on bad settings, and for
 * name= and timeline=, which are a disk's own.
 */
HvstorDiskModel *hvstor_disk_model_new(const char *settings, char **err);
/* Whether a disk made with m still exists (any thread). */
bool hvstor_disk_model_in_use(const HvstorDiskModel *m);
/* The handle goes; disks made with it keep the caps they share. NULL: nothing. */
void hvstor_disk_model_free(HvstorDiskModel *m);

typedef struct HvstorDiskConfig {
    const char *backend;  /* "file", "ram", "null" or "drive" */
    const char *path;     /* file */
    uint64_t size;        /* ram, null: bytes, a multiple of 512 */
    bool read_only;
    bool direct;          /* file: O_DIRECT where the file system allows it */
    const char *serial;   /* may be NULL */
    uint8_t lun;
    /*
     * Azure-like performance model between the controller and the backend, e.g.
     * "profile=premium-p10,time-scale=8" (docs/perf-model.md); NULL or "" for none.
     */
    const char *perf;
    /* Or a shared model in place of perf (not both); used only while hvstor_disk_new runs. */
    const HvstorDiskModel *model;
    const char *name;     /* for statistics and the timeline */
    /*
     * Injected fault, e.g. "error=medium,ops=read,lba=0-99" or "stall=hold,ops=write"
     * (include/scsi/hvstor/scsi/fault.h, docs/fault-injection.md); NULL or "" for none.
     */
    const char *fault;
    /* drive: the storage; copied, and used until the disk is freed. NULL otherwise. */
    const HvstorBlockOps *block;
    /*
     * true: none of the device's own notices for this disk, neither ENUMERATE_BUS when it is
     * attached or detached nor UNIT ATTENTION when its capacity changes; the guest learns of
     * them only when a test tells it (hvstor_controller_notify, a fault's srb=...,sense=6/2a/09).
     */
    bool without_notices;
} HvstorDiskConfig;

/*
 * NULL on failure, message in *err (free() it). Attaching to a controller the guest is
 * connected to tells the guest to rescan (hot plug). The disk lives until
 * hvstor_disk_free or until its controller's VMBus is freed.
 */
HvstorDisk *hvstor_disk_new(HvstorController *c, const HvstorDiskConfig *cfg, char **err);
/*
 * Hot removal: takes d off its LUN (the guest is told to rescan), waits until no channel
 * worker can still reach it and none of its requests is left in its backend, and frees
 * it; d is invalid afterwards. Blocks for as long as that takes (the workers' current
 * batches and the disk's I/O), never on the guest. NULL d: nothing to do, true. False
 * with a message in *err (free() it) when d is not one of c's disks, e.g. a disk of
 * another controller; nothing changes then.
 */
bool hvstor_disk_free(HvstorController *c, HvstorDisk *d, char **err);
/*
 * Hot removal without blocking: takes d off its LUN now (the guest is told to rescan,
 * commands a stall fault holds go to the backend; returns once no channel worker can still
 * reach d), then, on a thread of the model, waits for d's requests in its backend, frees d
 * and calls done(opaque) from that thread. d is invalid from this call on. False with a
 * message in *err (free() it) when d is not one of c's disks; nothing changes then, and
 * done is not called.
 */
bool hvstor_disk_remove(HvstorController *c, HvstorDisk *d, void (*done)(void *opaque),
                        void *opaque, char **err);
/*
 * VM-level caps shared by the modelled disks created afterwards, e.g.
 * "profile=Standard_F32s_v2,time-scale=8". False with a message on bad settings.
 */
bool hvstor_vmbus_set_vm_perf(HvstorVmbus *vb, const char *spec, char **err);

/*
 * The disk's live statistics as one JSON object (malloc'd; free() it); NULL on failure
 * or for a NULL disk.
 */
char *hvstor_disk_stats_json(HvstorDisk *d);
/*
 * Replaces the disk's injected fault while the guest runs ("none" or "" clears it; commands
 * a stall held start at once). False with a message in *err (free() it) when the text is
 * not a fault; the old fault stays then.
 */
bool hvstor_disk_set_fault(HvstorDisk *d, const char *fault, char **err);
/*
 * The disk's fault in effect, as text (malloc'd; free() it): as it was set, or as a loaded
 * state had it (savevm and migration carry it); "none" for none. NULL on failure or for a
 * NULL disk.
 */
char *hvstor_disk_fault(HvstorDisk *d);
/*
 * Changes the disk's capacity to `bytes` while the guest runs. The next command the guest
 * sends to it gets CHECK CONDITION, UNIT ATTENTION, CAPACITY DATA HAS CHANGED (2A/09) once,
 * and READ CAPACITY reports the new size. A file grows (it is extended) and shrinks (it
 * keeps its length; bytes a later grow exposes read as zeros); a RAM disk takes any size up
 * to the one it was made with; a null disk any size. False with a message in *err (free()
 * it) when bytes is 0 or not a multiple of 512, or the backend cannot take it (a read-only
 * file, a block device's own size, a file system's limit); nothing changes then.
 */
bool hvstor_disk_resize(HvstorDisk *d, uint64_t bytes, char **err);
/* The disk's capacity in bytes; 0 for a NULL disk. */
uint64_t hvstor_disk_size(HvstorDisk *d);
/*
 * Sends the guest an unsolicited packet on the controller's primary channel:
 * "enumerate-bus" (VSTOR_OPERATION_ENUMERATE_BUS) or "remove-device" (REMOVE_DEVICE); storvsc
 * rescans the bus on either. It waits, as the hot-plug notice does, for the guest's first SRB
 * after its handshake. False with a message in *err (free() it) for another value, or when
 * the guest has not opened the primary channel (no session to tell).
 */
bool hvstor_controller_notify(HvstorController *c, const char *notice, char **err);
/*
 * How the controller answers the guest's RESET_LUN, RESET_BUS and RESET_ADAPTER: "answer"
 * (the default: success), "ignore" (held unanswered until this changes, the channel closes
 * or, for RESET_LUN, the LUN is detached), "fail" (operation status 0xC0000001). False with a
 * message in *err (free() it) for another value; nothing changes then.
 */
bool hvstor_controller_set_reset(HvstorController *c, const char *answer, char **err);
/* The current setting, as hvstor_controller_set_reset takes it (malloc'd; free() it). */
char *hvstor_controller_reset(HvstorController *c);
/*
 * The controller's live statistics: totals (with the resets the guest sent, by operation,
 * those held now, and the rescan notices sent) and one object per channel (packets, SRBs,
 * completions, interrupts, ring-full waits, outstanding and its maximum, bad packets).
 * JSON, malloc'd; NULL on failure or for a NULL controller.
 */
char *hvstor_controller_stats_json(HvstorController *c);
/*
 * The bus's live statistics: VMBus messages, GPADLs, offers and open channels, the
 * negotiated version, hypercalls and SynIC messages. JSON, malloc'd; NULL on failure.
 */
char *hvstor_vmbus_stats_json(HvstorVmbus *vb);

#ifdef __cplusplus
}
#endif

#endif
