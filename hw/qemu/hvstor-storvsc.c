/*
 * hv-storvsc: a Hyper-V synthetic SCSI controller on the emulated VMBus, and
 * hv-disk: a SCSI disk on one of its LUNs. The storage protocol, the SCSI
 * target and the backends live in the C++ core (include/hvstor/capi.h).
 *
 *   -device hv-vmbus-bridge            (first: the partition and VMBus, bus "vmbus")
 *   -device hv-storvsc,id=scsi0[,max-subchannels=N][,max-transfer=BYTES][,inline-rounds=off]
 *          [,iothread=IOTHREAD][,reset=answer|ignore|fail]
 *          [,class=scsi|ide|fc][,port-wwn=16 HEX DIGITS,node-wwn=16 HEX DIGITS]
 *   -device '{"driver":"hv-storvsc","id":"scsi0","iothread-vq-mapping":[{"iothread":"io0"},
 *             {"iothread":"io1"}]}'
 *   -device hv-disk,bus=scsi0.0,lun=0,file=disk.img[,readonly=on][,direct=off]
 *   -device hv-disk,bus=scsi0.0,lun=1,backend=null,size=64G[,fault=...][,notices=off]
 *   -device hv-disk,bus=scsi0.0,lun=2,drive=DRIVE[,iothread=IOTHREAD]
 *   -object hv-disk-model,id=p10,profile=premium-p10 -device hv-disk,...,perf=p10
 *   -object hv-fault,id=f0,error=medium,ops=read -device hv-disk,...,fault=f0
 *
 * drive= puts the disk on QEMU's block layer (-drive if=none / -blockdev: qcow2, backing
 * chains, throttling); its I/O runs in an IOThread, iothread= or one of its own
 * (hvstor-drive.c, docs/drive.md).
 *
 * iothread= on the controller runs its channels' workers in that IOThread's AioContext
 * instead of a thread per channel: a turn each time the channel's eventfd fires. A drive=
 * disk in the same IOThread then takes its requests in the thread that parsed them.
 * iothread-vq-mapping= spreads the channels over several IOThreads as it spreads
 * virtio-blk's queues: its "vqs" are channel indexes (0 the primary, k subchannel k), and
 * without them channel i goes to the (i mod n)th IOThread of the list.
 *
 * Disks can be added and removed while the guest runs (QMP device_add and
 * device_del of hv-disk); the guest is told to rescan its bus each time, unless the
 * disk has notices=off (nor is a capacity change reported then); hv-storvsc's notify
 * (qom-set enumerate-bus or remove-device) tells it on demand. hv-storvsc's reset
 * chooses how the guest's resets are answered: answer, ignore (held), fail.
 *
 * class= chooses which of the three VMBus device classes Linux's storvsc binds the
 * controller is offered as: scsi (the default), ide (Generation 1's IDE accelerator: one
 * disk at LUN 0, no subchannels) or fc (a Fibre Channel HBA whose port-wwn and node-wwn
 * the guest asks for). ("type" is every QOM object's own, the type name.)
 *
 * Both have a "stats" property (a JSON object for QMP qom-get): per channel for the
 * controller, the disk's I/O for hv-disk. hv-disk's "capacity" (bytes) reads the
 * disk's size and changes it while the guest runs (qom-set): a file grows, RAM up
 * to its size at creation, null to anything; the guest's next command gets UNIT
 * ATTENTION, CAPACITY DATA HAS CHANGED (2A/09). Guest protocol errors are logged as
 * "hv-storvsc ID: relid N: ..." under -d guest_errors.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qemu/module.h"
#include "qemu/thread.h"
#include "block/aio.h"
#include "qemu/uuid.h"
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "hw/boards.h"
#include "hw/hotplug.h"
#include "hw/qdev-core.h"
#include "hw/qdev-properties.h"
#include "hw/qdev-properties-system.h"
#include "hw/virtio/iothread-vq-mapping.h"
#include "hvstor-drive.h"
#include "hvstor-internal.h"
#include "hvstor-vmbus.h"

#define TYPE_HV_STORVSC "hv-storvsc"
#define TYPE_HV_SCSI_BUS "hv-scsi-bus"
#define TYPE_HV_DISK "hv-disk"
OBJECT_DECLARE_SIMPLE_TYPE(HvStorvsc, HV_STORVSC)
OBJECT_DECLARE_SIMPLE_TYPE(HvDisk, HV_DISK)

/* "max-subchannels" left at this means one channel per vCPU (see realize). */
#define HV_STORVSC_SUBCHANNELS_AUTO 0xFFFF

/* On the bridge's VMBus bus; its disks plug into its own bus, "<id>.0". */
struct HvStorvsc {
    DeviceState parent_obj;
    BusState bus;
    QemuUUID instance;
    uint16_t max_subchannels;
    uint32_t max_transfer;
    uint32_t max_outstanding;
    bool inline_rounds;
    IOThread *iothread;    /* iothread=: where the channels' workers turn */
    IOThreadVirtQueueMappingList *iothread_vq_mapping;  /* or spread over these */
    char *reset;           /* reset=: answer, ignore, fail (also qom-set) */
    char *notify;          /* the last notice sent (notify=, qom-set only) */
    char *device_class;    /* class=: scsi (NULL), ide, fc */
    char *port_wwn;        /* class=fc: port-wwn=, node-wwn= (defaults set at realize) */
    char *node_wwn;
    HvstorController *ctl;
};

struct HvDisk {
    DeviceState parent_obj;
    uint8_t lun;
    char *backend;
    char *file;
    uint64_t size;
    bool readonly;
    bool direct;
    char *serial;
    char *perf;
    char *fault;  /* also settable while the guest runs (qom-set) */
    bool notices; /* off: no ENUMERATE_BUS on plug/unplug, no UNIT ATTENTION on resize */
    BlockConf conf;      /* drive= */
    IOThread *iothread;  /* iothread=, for drive= */
    HvDrive *drive;
    HvstorDisk *disk;    /* NULL once its removal started */
    bool removing;       /* device_del: the model finishes the disk's requests */
};

/*
 * The channels' event loop over an IOThread's AioContext (HvstorEventLoop).
 * A watch is set from the caller's thread (aio_set_fd_handler takes the context's list
 * lock and notifies it): a channel opens on a vCPU thread under the VMBus server's lock,
 * which a turn in the IOThread offering subchannels may be waiting for, so the caller must
 * not wait for the IOThread.
 * A watch is cleared from within the context, as QEMU's devices detach their host
 * notifiers from an IOThread: once the bottom half ran there, the handler is not running
 * and never runs again. The caller (a channel's closer) waits for it; the IOThread never
 * waits for the BQL, so a caller holding it cannot deadlock it either.
 */
typedef struct HvLoopWatch {
    AioContext *ctx;
    int fd;
    void (*ready)(void *arg);
    void *arg;
    QemuSemaphore ran;
} HvLoopWatch;

static void hv_loop_readable(void *opaque)
{
    HvLoopWatch *w = opaque;

    w->ready(w->arg);
}

static void hv_loop_detach(void *opaque)
{
    HvLoopWatch *w = opaque;

    aio_set_fd_handler(w->ctx, w->fd, NULL, NULL, NULL, NULL, NULL);
    qemu_sem_post(&w->ran);
}

/* Runs the detach in w's AioContext and returns once it has. */
static void hv_loop_detach_there(HvLoopWatch *w)
{
    if (in_aio_context_home_thread(w->ctx)) {
        hv_loop_detach(w);
    } else {
        aio_bh_schedule_oneshot(w->ctx, hv_loop_detach, w);
    }
    qemu_sem_wait(&w->ran);
}

static void *hv_loop_watch(void *opaque, int fd, void (*ready)(void *arg), void *arg)
{
    HvLoopWatch *w = g_new0(HvLoopWatch, 1);

    w->ctx = opaque;
    w->fd = fd;
    w->ready = ready;
    w->arg = arg;
    qemu_sem_init(&w->ran, 0);
    aio_set_fd_handler(w->ctx, fd, hv_loop_readable, NULL, NULL, NULL, w);
    return w;
}

static void hv_loop_unwatch(void *opaque, void *handle)
{
    HvLoopWatch *w = handle;

    hv_loop_detach_there(w);
    qemu_sem_destroy(&w->ran);
    g_free(w);
}

/*
 * The event loop of each channel place (the primary and cfg->max_subchannels; a subchannel
 * opened while the one before it still closes takes that one's place, storvsp's
 * queue_place), from iothread= or iothread-vq-mapping= (which then holds its IOThreads
 * until iothread_vq_mapping_cleanup); *loops is NULL without either: the channels have
 * threads of their own. The controller copies the array.
 */
static bool hv_storvsc_loops(HvStorvsc *s, HvstorControllerConfig *cfg,
                             HvstorEventLoop **loops, Error **errp)
{
    g_autofree AioContext **ctx = NULL;
    Error *local_err = NULL;
    uint16_t n;

    *loops = NULL;
    if (!s->iothread && !s->iothread_vq_mapping) {
        return true;
    }
    if (cfg->max_subchannels > 256) {
        return true; /* hvstor_controller_new refuses it, naming max-subchannels */
    }
    if (s->iothread && s->iothread_vq_mapping) {
        error_setg(errp, "hv-storvsc: iothread= and iothread-vq-mapping= cannot both be set");
        return false;
    }
    n = 1 + cfg->max_subchannels;
    ctx = g_new0(AioContext *, n);
    if (s->iothread_vq_mapping) {
        if (!iothread_vq_mapping_apply(s->iothread_vq_mapping, ctx, n, &local_err)) {
            error_propagate_prepend(errp, local_err,
                                    "hv-storvsc: iothread-vq-mapping (vq N is channel N, "
                                    "%u channels): ", n);
            return false;
        }
    } else {
        for (uint16_t i = 0; i < n; i++) {
            ctx[i] = iothread_get_aio_context(s->iothread);
        }
    }
    *loops = g_new0(HvstorEventLoop, n);
    for (uint16_t i = 0; i < n; i++) {
        (*loops)[i].opaque = ctx[i];
        (*loops)[i].watch = hv_loop_watch;
        (*loops)[i].unwatch = hv_loop_unwatch;
    }
    cfg->loops = *loops;
    cfg->nr_loops = n;
    return true;
}

static bool hv_storvsc_is(HvStorvsc *s, const char *device_class)
{
    return s->device_class && !strcmp(s->device_class, device_class);
}

/*
 * Defaults stable per controller index, so guests see the same device each boot: the
 * instance GUID (an IDE accelerator's as Hyper-V makes it: channel, then target 0, then
 * 8899) and an FC HBA's WWNs. The model checks every value.
 */
static void hv_storvsc_defaults(HvStorvsc *s, unsigned index)
{
    if (!s->device_class) {
        s->device_class = g_strdup("scsi"); /* what qom-get reads back */
    }
    if (qemu_uuid_is_null(&s->instance)) {
        if (hv_storvsc_is(s, "ide")) {
            g_autofree char *text =
                g_strdup_printf("%08x-0000-8899-0000-000000000000", index);
            qemu_uuid_parse(text, &s->instance);
        } else {
            qemu_uuid_parse("f8b3781b-1e82-4818-a1c3-63d806ec1500", &s->instance);
            s->instance.data[15] = index;
        }
    }
    if (hv_storvsc_is(s, "fc")) {
        uint64_t node = 0xc003ff0000ff0000ull | (uint64_t)(index & 0xff) << 8;

        if (!s->node_wwn) {
            s->node_wwn = g_strdup_printf("%016" PRIx64, node);
        }
        if (!s->port_wwn) {
            s->port_wwn = g_strdup_printf("%016" PRIx64, node | 1);
        }
    }
}

static void hv_storvsc_realize(DeviceState *dev, Error **errp)
{
    HvStorvsc *s = HV_STORVSC(dev);
    unsigned index;
    HvstorVmbus *vb = hv_vmbus_bus_vmbus(qdev_get_parent_bus(dev), &index);
    MachineState *ms = MACHINE(qdev_get_machine());
    HvstorControllerConfig cfg = { 0 };
    uint8_t wire[16];
    QemuUUID le;
    char *err = NULL;
    g_autofree char *name = NULL;
    g_autofree HvstorEventLoop *loops = NULL;

    hv_storvsc_defaults(s, index);
    /* VMBus carries GUIDs with the first three fields little-endian. */
    le = qemu_uuid_bswap(s->instance);
    memcpy(wire, le.data, 16);

    /*
     * By default every vCPU may have its own channel: storvsc asks for
     * min(CPUs - 1, offered) subchannels and sends from a CPU's own channel, so
     * queueing per channel is what a guest on a large Azure VM sees. An IDE
     * accelerator has none.
     */
    if (s->max_subchannels != HV_STORVSC_SUBCHANNELS_AUTO) {
        cfg.max_subchannels = s->max_subchannels;
    } else {
        cfg.max_subchannels = hv_storvsc_is(s, "ide") ? 0 : MIN(ms->smp.cpus - 1, 64);
    }
    cfg.max_transfer_bytes = s->max_transfer;
    cfg.max_outstanding = s->max_outstanding;
    cfg.worker_only = !s->inline_rounds;
    cfg.reset = s->reset;
    cfg.device_class = s->device_class;
    cfg.port_wwn = s->port_wwn;
    cfg.node_wwn = s->node_wwn;
    if (!hv_storvsc_loops(s, &cfg, &loops, errp)) {
        return;
    }
    name = dev->id ? g_strdup_printf("hv-storvsc %s", dev->id)
                   : g_strdup_printf("hv-storvsc #%u", index);
    cfg.name = name;
    s->ctl = hvstor_controller_new(vb, wire, &cfg, &err);
    if (!s->ctl) {
        hv_model_error(errp, err, "hv-storvsc");
        if (loops && s->iothread_vq_mapping) {
            iothread_vq_mapping_cleanup(s->iothread_vq_mapping);
        }
        return;
    }
    qbus_init(&s->bus, sizeof(s->bus), TYPE_HV_SCSI_BUS, dev, NULL);
    /* The bus plugs and unplugs its own disks (see hv_scsi_bus_class_init). */
    qbus_set_bus_hotplug_handler(&s->bus);
}

static const HvPropDoc hv_storvsc_docs[] = {
    { "instance", "VMBus instance GUID of the controller (default: stable per controller; "
                  "class=ide: the IDE channel's, 0000000N-0000-8899-0000-000000000000)" },
    { "max-subchannels", "subchannels offered at most (default: vCPUs - 1, at most 64: a "
                         "channel per vCPU, as storvsc wants)" },
    { "max-transfer", "largest transfer of one request in bytes; the guest's max_sectors "
                      "follows" },
    { "outstanding", "requests in flight per channel before the host stops reading that ring" },
    { "inline-rounds", "on: a guest signal or a completion that finds a channel's worker "
                       "asleep does the ring work on its own thread; off: every round on the "
                       "worker" },
    { "iothread", "the IOThread the channels' workers run in, instead of a thread per channel" },
    { "iothread-vq-mapping", "the channels spread over IOThreads, as virtio-blk spreads its "
                             "queues (vq 0 is the primary channel, vq k subchannel k)" },
    { "class", "the VMBus device class offered: scsi (default, synthetic SCSI controller), "
               "ide (Generation 1's IDE accelerator, one disk) or fc (virtual Fibre Channel)" },
    { "port-wwn", "class=fc: the HBA's port world wide name, 16 hex digits (FCHBA_DATA)" },
    { "node-wwn", "class=fc: the HBA's node world wide name, 16 hex digits (FCHBA_DATA)" },
    { "stats", "statistics, a JSON object: resets and notices, and per channel packets, SRBs, "
               "completions, errors, interrupts (read-only)" },
    { "reset", "how RESET_LUN, RESET_BUS and RESET_ADAPTER are answered: answer (default, "
               "success), fail (0xC0000001) or ignore (held until this changes)" },
    { "notify", "write enumerate-bus or remove-device to send that notice to the guest now "
                "(it rescans its bus); reads the last one sent" },
    { NULL }
};

static const Property hv_storvsc_props[] = {
    DEFINE_PROP_UUID_NODEFAULT("instance", HvStorvsc, instance),
    DEFINE_PROP_UINT16("max-subchannels", HvStorvsc, max_subchannels,
                       HV_STORVSC_SUBCHANNELS_AUTO),
    DEFINE_PROP_UINT32("max-transfer", HvStorvsc, max_transfer, 256 * 1024),
    DEFINE_PROP_UINT32("outstanding", HvStorvsc, max_outstanding, 256),
    DEFINE_PROP_BOOL("inline-rounds", HvStorvsc, inline_rounds, true),
    DEFINE_PROP_LINK("iothread", HvStorvsc, iothread, TYPE_IOTHREAD, IOThread *),
    DEFINE_PROP_IOTHREAD_VQ_MAPPING_LIST("iothread-vq-mapping", HvStorvsc, iothread_vq_mapping),
    DEFINE_PROP_STRING("class", HvStorvsc, device_class),
    DEFINE_PROP_STRING("port-wwn", HvStorvsc, port_wwn),
    DEFINE_PROP_STRING("node-wwn", HvStorvsc, node_wwn),
};

/* Live statistics for QMP, a JSON object: qom-get path=/machine/peripheral/ID property=stats */
static void hv_storvsc_get_stats(Object *obj, Visitor *v, const char *name, void *opaque,
                                 Error **errp)
{
    HvStorvsc *s = HV_STORVSC(obj);

    hv_visit_stats(v, name, s->ctl ? hvstor_controller_stats_json(s->ctl) : NULL, "hv-storvsc",
                   errp);
}

/*
 * How the guest's RESET_LUN / RESET_BUS / RESET_ADAPTER are answered: answer (the default),
 * ignore (held until this changes), fail. Given with the device or, while the guest runs,
 * qom-set path=/machine/peripheral/ID property=reset value=ignore. See
 * docs/fault-injection.md.
 */
static char *hv_storvsc_get_reset(Object *obj, Error **errp)
{
    HvStorvsc *s = HV_STORVSC(obj);
    char *now, *copy;

    if (!s->ctl) {
        return g_strdup(s->reset ? s->reset : "answer");
    }
    now = hvstor_controller_reset(s->ctl);
    if (!now) {
        error_setg(errp, "hv-storvsc: out of memory");
        return NULL;
    }
    copy = g_strdup(now);
    free(now);
    return copy;
}

static void hv_storvsc_set_reset(Object *obj, const char *value, Error **errp)
{
    HvStorvsc *s = HV_STORVSC(obj);
    char *err = NULL;

    /* Before realize the controller checks it when it is made. */
    if (s->ctl && !hvstor_controller_set_reset(s->ctl, value, &err)) {
        hv_model_error(errp, err, "hv-storvsc");
        return;
    }
    g_free(s->reset);
    s->reset = g_strdup(value);
}

/*
 * An unsolicited packet to the guest now: qom-set path=/machine/peripheral/ID
 * property=notify value=enumerate-bus (or remove-device); storvsc rescans its bus. Refused
 * while the guest has no session on the controller. qom-get reads the last one sent.
 */
static char *hv_storvsc_get_notify(Object *obj, Error **errp)
{
    HvStorvsc *s = HV_STORVSC(obj);

    return g_strdup(s->notify ? s->notify : "none");
}

static void hv_storvsc_set_notify(Object *obj, const char *value, Error **errp)
{
    HvStorvsc *s = HV_STORVSC(obj);
    char *err = NULL;

    if (!s->ctl) {
        error_setg(errp, "hv-storvsc: notify=%s: no storvsc session: the controller is not "
                   "running yet (set it while the guest runs)", value);
        return;
    }
    if (!hvstor_controller_notify(s->ctl, value, &err)) {
        hv_model_error(errp, err, "hv-storvsc");
        return;
    }
    g_free(s->notify);
    s->notify = g_strdup(value);
}

static void hv_storvsc_finalize(Object *obj)
{
    HvStorvsc *s = HV_STORVSC(obj);

    g_free(s->reset);
    g_free(s->notify);
}

static void hv_storvsc_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);

    dc->realize = hv_storvsc_realize;
    dc->bus_type = TYPE_HV_VMBUS_BUS;
    dc->desc = "Hyper-V synthetic SCSI controller (VMBus; after -device hv-vmbus-bridge)";
    dc->user_creatable = true;
    dc->hotpluggable = false;
    device_class_set_props(dc, hv_storvsc_props);
    set_bit(DEVICE_CATEGORY_STORAGE, dc->categories);
    object_class_property_add(klass, "stats", "any", hv_storvsc_get_stats, NULL, NULL, NULL);
    object_class_property_add_str(klass, "reset", hv_storvsc_get_reset, hv_storvsc_set_reset);
    object_class_property_add_str(klass, "notify", hv_storvsc_get_notify, hv_storvsc_set_notify);
    hv_describe_props(klass, hv_storvsc_docs);
}

/*
 * block_resize of the drive's node: the disk takes the new length, and the guest gets
 * UNIT ATTENTION, CAPACITY DATA HAS CHANGED as for a qom-set of capacity.
 */
static void hv_disk_drive_resized(void *opaque, uint64_t bytes)
{
    HvDisk *d = opaque;
    char *err = NULL;

    if (d->disk && !hvstor_disk_resize(d->disk, bytes, &err)) {
        hv_model_report(true, err, "hv-disk lun %u: the drive is now %" PRIu64 " bytes; the disk "
                        "keeps its size", d->lun, bytes);
    }
}

/*
 * The most a drive= disk's controller may transfer at once: a request's guest pages, one
 * iovec each when scattered, plus the block layer's padding must stay within IOV_MAX.
 */
#define HV_DRIVE_MAX_TRANSFER ((IOV_MAX - 3) * 4096)

/* drive=: the block layer's storage in place of file= or backend=. */
static bool hv_disk_open_drive(HvDisk *d, uint32_t max_transfer, HvstorBlockOps *ops,
                               Error **errp)
{
    if (d->file || d->backend) {
        error_setg(errp, "hv-disk: drive= takes the place of file= and backend=");
        return false;
    }
    if (max_transfer > HV_DRIVE_MAX_TRANSFER) {
        error_setg(errp, "hv-disk: drive= needs the controller's max-transfer at most %d "
                   "(IOV_MAX pages less 3), not %" PRIu32, HV_DRIVE_MAX_TRANSFER, max_transfer);
        return false;
    }
    d->drive = hv_drive_new(&d->conf, d->iothread, d->readonly, hv_disk_drive_resized, d,
                            ops, errp);
    return d->drive != NULL;
}

static void hv_disk_realize(DeviceState *dev, Error **errp)
{
    HvDisk *d = HV_DISK(dev);
    HvStorvsc *ctl = HV_STORVSC(qdev_get_parent_bus(dev)->parent);
    HvstorDiskConfig cfg = {
        .backend = d->backend ? d->backend : (d->file ? "file" : NULL),
        .path = d->file,
        .size = d->size,
        .read_only = d->readonly,
        .direct = d->direct,
        .serial = d->serial,
        .lun = d->lun,
        .name = dev->id,
        .without_notices = !d->notices,
    };
    HvstorBlockOps block;
    HvstorDiskModel *model;
    char *err = NULL;

    /* perf= and fault= as text, or the id of an -object holding them (hvstor-objects.c). */
    cfg.perf = hv_settings_resolve(TYPE_HV_DISK_MODEL, "perf", d->perf, &model, errp);
    if (d->perf && !cfg.perf) {
        return;
    }
    cfg.model = model;
    cfg.fault = hv_settings_resolve(TYPE_HV_FAULT, "fault", d->fault, NULL, errp);
    if (d->fault && !cfg.fault) {
        return;
    }
    if (d->conf.blk) {
        if (!hv_disk_open_drive(d, ctl->max_transfer, &block, errp)) {
            return;
        }
        cfg.backend = "drive";
        cfg.block = &block;
    } else if (d->iothread) {
        error_setg(errp, "hv-disk: iothread= goes with drive=");
        return;
    } else if (d->conf.rerror != BLOCKDEV_ON_ERROR_AUTO ||
               d->conf.werror != BLOCKDEV_ON_ERROR_AUTO) {
        error_setg(errp, "hv-disk: rerror= and werror= go with drive= (the disk's own "
                   "backends report every error to the guest)");
        return;
    }
    if (!cfg.backend) {
        error_setg(errp, "hv-disk: give file=PATH, drive=ID, or backend=ram|null with size=");
        return;
    }
    d->disk = hvstor_disk_new(ctl->ctl, &cfg, &err);
    if (!d->disk) {
        hv_model_error(errp, err, "hv-disk lun %u", d->lun);
        hv_drive_free(d->drive);
        d->drive = NULL;
    }
}

/*
 * A disk whose device goes away other than by device_del (which frees the disk first,
 * below), or a drive= disk: off its LUN (the guest is told to rescan), its in-flight
 * I/O waited for, then freed. Blocks only on the disk's own backend, never on the guest.
 */
static void hv_disk_unrealize(DeviceState *dev)
{
    HvDisk *d = HV_DISK(dev);
    HvStorvsc *ctl = HV_STORVSC(qdev_get_parent_bus(dev)->parent);
    char *err = NULL;

    if (d->disk && !hvstor_disk_free(ctl->ctl, d->disk, &err)) {
        hv_model_report(false, err, "hv-disk lun %u", d->lun);
    }
    d->disk = NULL;
    hv_drive_free(d->drive);
    d->drive = NULL;
}

static const HvPropDoc hv_disk_docs[] = {
    { "lun", "the disk's LUN on target 0 of its controller, 0..63" },
    { "backend", "file (default with file=), ram or null (both with size=); drive= for "
                 "QEMU's block layer" },
    { "file", "a raw image file as the disk's storage (libaio)" },
    { "size", "the size of a ram or null disk in bytes (K, M, G suffixes)" },
    { "readonly", "write protection: writes fail with DATA PROTECT" },
    { "direct", "open file= with O_DIRECT, falling back to buffered I/O where refused" },
    { "serial", "the VPD unit serial number the guest reads" },
    { "perf", "an Azure-like disk model in front of the storage: the id of an -object "
              "hv-disk-model (disks naming one share its caps), or its settings as text, e.g. "
              "profile=premium-p10,,burst=off (docs/perf-model.md)" },
    { "notices", "off: no ENUMERATE_BUS when the disk is plugged or unplugged and no UNIT "
                 "ATTENTION when its capacity changes" },
    { "drive", "a -drive or -blockdev node as the disk's storage (QEMU's block layer)" },
    { "iothread", "with drive=: the IOThread the disk's block I/O runs in" },
    { "stats", "statistics, a JSON object: the disk's I/O, or its model's (read-only)" },
    { "fault", "fail, stall or answer chosen I/O: the id of an -object hv-fault, or its "
               "settings as text, e.g. error=medium,,ops=read,,lba=0-99 "
               "(docs/fault-injection.md); settable at run time, read back as the text in "
               "effect, which savevm and migration carry" },
    { "capacity", "the disk's size in bytes; set at run time, the guest gets UNIT ATTENTION "
                  "and rescans" },
    { "rerror", "with drive=: what a failed read does: report (the guest gets the error), "
                "ignore, stop (the VM stops; cont retries it), auto (the drive's own; default)" },
    { "werror", "with drive=: what a failed write does: report, ignore, stop, enospc (stop "
                "on ENOSPC only), auto (the drive's own, enospc for -blockdev; default)" },
    { NULL }
};

static const Property hv_disk_props[] = {
    DEFINE_PROP_UINT8("lun", HvDisk, lun, 0),
    DEFINE_PROP_STRING("backend", HvDisk, backend),
    DEFINE_PROP_STRING("file", HvDisk, file),
    DEFINE_PROP_SIZE("size", HvDisk, size, 0),
    DEFINE_PROP_BOOL("readonly", HvDisk, readonly, false),
    DEFINE_PROP_BOOL("direct", HvDisk, direct, true),
    DEFINE_PROP_STRING("serial", HvDisk, serial),
    DEFINE_PROP_STRING("perf", HvDisk, perf),
    DEFINE_PROP_BOOL("notices", HvDisk, notices, true),
    DEFINE_PROP_DRIVE("drive", HvDisk, conf.blk),
    DEFINE_BLOCK_ERROR_PROPERTIES(HvDisk, conf),
    DEFINE_PROP_LINK("iothread", HvDisk, iothread, TYPE_IOTHREAD, IOThread *),
};

/* Live statistics for QMP, a JSON object: qom-get path=/machine/peripheral/ID property=stats */
static void hv_disk_get_stats(Object *obj, Visitor *v, const char *name, void *opaque,
                              Error **errp)
{
    HvDisk *d = HV_DISK(obj);

    if (!d->disk) {
        error_setg(errp, d->removing ? "hv-disk is being removed" : "hv-disk is not realized");
        return;
    }
    hv_visit_stats(v, name, hvstor_disk_stats_json(d->disk), "hv-disk", errp);
}

/*
 * Fault injection, e.g. fault=error=medium,,ops=read (commas doubled on the command line)
 * or, while the guest runs: qom-set path=/machine/peripheral/ID property=fault
 * value=stall=hold,ops=write; srb=aborted,scsi=check-condition,sense=6/2a/09 answers with
 * exactly those transport fields. "none" clears it. See docs/fault-injection.md. Once
 * realized it reads back as the fault in effect, as text: what was set, or what a loaded
 * state had.
 */
static char *hv_disk_get_fault(Object *obj, Error **errp)
{
    HvDisk *d = HV_DISK(obj);
    char *text = d->disk ? hvstor_disk_fault(d->disk) : NULL;
    char *out;

    if (text) {
        out = g_strdup(text);
        free(text);
        return out;
    }
    return g_strdup(d->fault ? d->fault : "none");
}

static void hv_disk_set_fault(Object *obj, const char *value, Error **errp)
{
    HvDisk *d = HV_DISK(obj);
    char *err = NULL;

    if (d->removing) {
        error_setg(errp, "hv-disk is being removed");
        return;
    }
    if (d->disk) {
        const char *text = hv_settings_resolve(TYPE_HV_FAULT, "fault", value, NULL, errp);

        if (!text) {
            return;
        }
        if (!hvstor_disk_set_fault(d->disk, text, &err)) {
            hv_model_error(errp, err, "hv-disk lun %u", d->lun);
            return;
        }
    }
    g_free(d->fault);
    d->fault = g_strdup(value);
}

/*
 * The disk's capacity in bytes, changeable while the guest runs:
 * qom-set path=/machine/peripheral/ID property=capacity value=BYTES. The guest's next
 * command gets UNIT ATTENTION, CAPACITY DATA HAS CHANGED, on which storvsc rescans
 * the disk. See docs/fault-injection.md.
 */
static void hv_disk_get_capacity(Object *obj, Visitor *v, const char *name,
                                 void *opaque, Error **errp)
{
    HvDisk *d = HV_DISK(obj);
    uint64_t bytes = d->disk ? hvstor_disk_size(d->disk) : d->size;

    if (d->removing) {
        error_setg(errp, "hv-disk is being removed");
        return;
    }
    visit_type_size(v, name, &bytes, errp);
}

static void hv_disk_set_capacity(Object *obj, Visitor *v, const char *name,
                                 void *opaque, Error **errp)
{
    HvDisk *d = HV_DISK(obj);
    uint64_t bytes;
    char *err = NULL;

    if (!visit_type_size(v, name, &bytes, errp)) {
        return;
    }
    if (d->removing) {
        error_setg(errp, "hv-disk is being removed");
        return;
    }
    if (!d->disk) {
        error_setg(errp, "hv-disk: capacity changes a running disk; "
                   "give size= (or the file's length) when creating it");
        return;
    }
    if (!hvstor_disk_resize(d->disk, bytes, &err)) {
        hv_model_error(errp, err, "hv-disk lun %u: capacity %" PRIu64 " refused", d->lun, bytes);
    }
}

static void hv_disk_finalize(Object *obj)
{
    HvDisk *d = HV_DISK(obj);

    g_free(d->fault);
}

/*
 * A machine reset, first phase (before the bridge's reset waits for the guest's requests):
 * requests werror/rerror held for the VM's cont complete with their errors now.
 */
static void hv_disk_reset_enter(Object *obj, ResetType type)
{
    hv_drive_release_held(HV_DISK(obj)->drive);
}

static void hv_disk_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    ResettableClass *rc = RESETTABLE_CLASS(klass);

    dc->realize = hv_disk_realize;
    dc->unrealize = hv_disk_unrealize;
    rc->phases.enter = hv_disk_reset_enter;
    dc->bus_type = TYPE_HV_SCSI_BUS;
    dc->desc = "SCSI disk on an hv-storvsc controller";
    dc->user_creatable = true;
    dc->hotpluggable = true;
    device_class_set_props(dc, hv_disk_props);
    set_bit(DEVICE_CATEGORY_STORAGE, dc->categories);
    object_class_property_add(klass, "stats", "any", hv_disk_get_stats, NULL, NULL, NULL);
    object_class_property_add_str(klass, "fault", hv_disk_get_fault, hv_disk_set_fault);
    object_class_property_add(klass, "capacity", "size", hv_disk_get_capacity,
                              hv_disk_set_capacity, NULL, NULL);
    hv_describe_props(klass, hv_disk_docs);
}

/* Main loop: the removed disk's device goes (DEVICE_DELETED follows). */
static void hv_disk_removed_bh(void *opaque)
{
    DeviceState *dev = opaque;

    hotplug_handler_unplug(qdev_get_hotplug_handler(dev), dev, &error_abort);
    object_unparent(OBJECT(dev));
    object_unref(OBJECT(dev));
}

/* A thread of the model: the disk's requests are done and the disk is freed. */
static void hv_disk_removed(void *opaque)
{
    aio_bh_schedule_oneshot(qemu_get_aio_context(), hv_disk_removed_bh, opaque);
}

/*
 * device_del. The disk goes off its LUN at once (the guest is told to rescan), and the
 * VM runs on while its backend finishes what it was given, which a throttled model or a
 * slow file may take long to do: a thread of the model waits for that and frees the
 * disk, then a bottom half unrealizes the device. A second device_del meanwhile is
 * refused ("already in the process of unplug"). A drive= disk is unplugged at once: its
 * requests are the block layer's, drained from the main loop as QEMU's own devices do.
 */
static void hv_scsi_bus_unplug_request(HotplugHandler *hotplug_dev, DeviceState *dev,
                                       Error **errp)
{
    HvDisk *d = HV_DISK(dev);
    HvStorvsc *ctl = HV_STORVSC(qdev_get_parent_bus(dev)->parent);
    HvstorDisk *disk = d->disk;
    Error *local_err = NULL;
    char *err = NULL;

    if (d->drive || !disk) {
        hotplug_handler_unplug(hotplug_dev, dev, &local_err);
        if (!local_err) {
            object_unparent(OBJECT(dev));
        }
        error_propagate(errp, local_err);
        return;
    }
    d->disk = NULL;
    d->removing = true;
    dev->pending_deleted_event = true;
    object_ref(OBJECT(dev)); /* until the bottom half is done with it */
    if (!hvstor_disk_remove(ctl->ctl, disk, hv_disk_removed, dev, &err)) {
        object_unref(OBJECT(dev));
        dev->pending_deleted_event = false;
        d->removing = false;
        d->disk = disk;
        hv_model_error(errp, err, "hv-disk lun %u", d->lun);
    }
}

static void hv_scsi_bus_class_init(ObjectClass *klass, void *data)
{
    HotplugHandlerClass *hc = HOTPLUG_HANDLER_CLASS(klass);

    hc->unplug_request = hv_scsi_bus_unplug_request;
    hc->unplug = qdev_simple_device_unplug_cb;
}

static const TypeInfo hv_storvsc_types[] = {
    {
        .name = TYPE_HV_STORVSC,
        .parent = TYPE_DEVICE,
        .instance_size = sizeof(HvStorvsc),
        .instance_finalize = hv_storvsc_finalize,
        .class_init = hv_storvsc_class_init,
    },
    {
        .name = TYPE_HV_SCSI_BUS,
        .parent = TYPE_BUS,
        .instance_size = sizeof(BusState),
        .class_init = hv_scsi_bus_class_init,
        .interfaces = (InterfaceInfo[]) {
            { TYPE_HOTPLUG_HANDLER },
            { }
        },
    },
    {
        .name = TYPE_HV_DISK,
        .parent = TYPE_DEVICE,
        .instance_size = sizeof(HvDisk),
        .instance_finalize = hv_disk_finalize,
        .class_init = hv_disk_class_init,
    },
};

DEFINE_TYPES(hv_storvsc_types)
