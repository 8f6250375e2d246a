/*
 * hv-disk's drive=: the disk's storage is a QEMU BlockBackend (-drive, -blockdev: raw,
 * qcow2, backing chains, throttle groups, snapshots), running in an IOThread.
 *
 * The device model submits from its channel workers (any thread). Each request is put on
 * a lock-free list and a bottom half in the drive's AioContext starts it there, as the
 * block layer requires; completions come back in that AioContext and go straight to the
 * model. The AioContext is an IOThread's, the user's (iothread=ID) or one of the drive's
 * own: never the main loop's, which a machine reset blocks while it waits for the guest's
 * requests to finish. Every request is accounted as the block layer's devices account
 * theirs (query-blockstats: operations, bytes, times, failures), as read, write, flush or
 * unmap.
 *
 * A failed request meets the drive's rerror/werror as virtio-blk's do: report (the guest
 * gets the error), ignore (it gets success), stop or enospc (the VM stops with
 * BLOCK_IO_ERROR, the request is held and started again when the VM runs). A held request
 * still counts as outstanding; a machine reset, the disk's unplug and its drain complete it
 * with its error, so that each request is answered once even if the VM never runs again.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/iov.h"
#include "qemu/queue.h"
#include "qapi/error.h"
#include "block/accounting.h"
#include "block/aio.h"
#include "block/aio-wait.h"
#include "hw/block/block.h"
#include "system/block-backend.h"
#include "system/iothread.h"
#include "system/runstate.h"
#include "hvstor-drive.h"

/*
 * Discards and zeroed ranges go to the block layer in pieces no larger than this: its
 * write-zeroes path refuses requests of 2 GiB, which UNMAP and WRITE SAME may ask for.
 */
#define HV_DRIVE_PIECE (1ULL << 30)

typedef struct HvDriveReq HvDriveReq;

struct HvDrive {
    BlockBackend *blk;
    AioContext *ctx;
    IOThread *own_iothread; /* NULL when the user named one */
    QEMUBH *bh;
    QSLIST_HEAD(, HvDriveReq) pending; /* pushed from any thread, taken by bh */
    QSIMPLEQ_HEAD(, HvDriveReq) held;  /* stopped by werror/rerror; the drive's AioContext */
    QEMUBH *retry_bh;                  /* the drive's AioContext: starts the held again */
    VMChangeStateEntry *run_state;
    /*
     * Requests submitted and not yet completed. blk_drain alone is not enough: a
     * request parked by someone else's drained section has given its in-flight count
     * back to the BlockBackend and resumes only when that section ends.
     */
    unsigned outstanding;
    char *name;
    uint64_t length;    /* the node's length, as the main thread last read it */
    QEMUBH *resize_bh;  /* main loop: tells the disk about block_resize */
    HvDriveResized *resized;
    void *resized_opaque;
};

struct HvDriveReq {
    QSLIST_ENTRY(HvDriveReq) next;
    QSIMPLEQ_ENTRY(HvDriveReq) held_next;
    HvDrive *drv;
    HvstorBlockIo io;
    void *token;
    QEMUIOVector qiov;
    unsigned pieces; /* block-layer requests still running */
    int ret;         /* the first error among them */
    BlockAcctCookie acct;
};

static unsigned drive_count;

/*
 * rerror/werror for a failed request: true when it is held (stop, or enospc on ENOSPC: the
 * VM stops); otherwise req->ret is what the guest gets (0 for ignore). The drive's
 * AioContext.
 */
static bool hv_drive_error_action(HvDriveReq *req)
{
    HvDrive *drv = req->drv;
    bool is_read = req->io.op == HVSTOR_BLOCK_READ;
    int error = -req->ret;
    BlockErrorAction action = blk_get_error_action(drv->blk, is_read, error);

    if (action == BLOCK_ERROR_ACTION_STOP) {
        /* Before the stop request: the VM cannot run again before it is held. */
        QSIMPLEQ_INSERT_TAIL(&drv->held, req, held_next);
    } else if (action == BLOCK_ERROR_ACTION_IGNORE) {
        req->ret = 0;
    }
    blk_error_action(drv->blk, action, is_read, error);
    return action == BLOCK_ERROR_ACTION_STOP;
}

/* The request's one completion. The drive's AioContext. */
static void hv_drive_finish(HvDriveReq *req)
{
    HvDrive *drv = req->drv;

    if (req->ret == 0) {
        block_acct_done(blk_get_stats(drv->blk), &req->acct);
    } else {
        block_acct_failed(blk_get_stats(drv->blk), &req->acct);
    }
    hvstor_block_complete(req->token, req->ret);
    g_free(req);
    /* Last: the drainer may free drv once it reads 0. */
    qatomic_dec(&drv->outstanding);
    aio_wait_kick();
}

/* In the drive's AioContext, once per block-layer request. */
static void hv_drive_piece_done(void *opaque, int ret)
{
    HvDriveReq *req = opaque;

    if (ret < 0 && req->ret == 0) {
        req->ret = ret;
    }
    if (--req->pieces > 0) {
        return;
    }
    if (req->ret < 0 && hv_drive_error_action(req)) {
        return;
    }
    hv_drive_finish(req);
}

static void hv_drive_start_ranged(HvDriveReq *req)
{
    BlockBackend *blk = req->drv->blk;
    uint64_t at = req->io.offset, end = req->io.offset + req->io.length;

    /* Counted before the first starts: a piece may complete at once. */
    req->pieces = MAX(1, DIV_ROUND_UP(req->io.length, HV_DRIVE_PIECE));
    do {
        uint64_t n = MIN(end - at, HV_DRIVE_PIECE);

        if (req->io.op == HVSTOR_BLOCK_DISCARD) {
            blk_aio_pdiscard(blk, at, n, hv_drive_piece_done, req);
        } else {
            blk_aio_pwrite_zeroes(blk, at, n, 0, hv_drive_piece_done, req);
        }
        at += n;
    } while (at < end);
}

/* The block layer's accounting kind of a request (query-blockstats). */
static enum BlockAcctType hv_drive_acct_type(HvstorBlockOp op)
{
    switch (op) {
    case HVSTOR_BLOCK_READ:
        return BLOCK_ACCT_READ;
    case HVSTOR_BLOCK_FLUSH:
        return BLOCK_ACCT_FLUSH;
    case HVSTOR_BLOCK_DISCARD:
        return BLOCK_ACCT_UNMAP;
    default:
        return BLOCK_ACCT_WRITE; /* writes and zeroed ranges, as virtio-blk counts them */
    }
}

static void hv_drive_start(HvDriveReq *req)
{
    BlockBackend *blk = req->drv->blk;

    req->pieces = 1;
    block_acct_start(blk_get_stats(blk), &req->acct,
                     req->io.op == HVSTOR_BLOCK_FLUSH ? 0 : req->io.length,
                     hv_drive_acct_type(req->io.op));
    switch (req->io.op) {
    case HVSTOR_BLOCK_READ:
    case HVSTOR_BLOCK_WRITE:
        /* The iovec is guest memory the model mapped; it stays until completion. */
        qemu_iovec_init_external(&req->qiov, (struct iovec *)req->io.iov, req->io.iovcnt);
        if (req->io.op == HVSTOR_BLOCK_READ) {
            blk_aio_preadv(blk, req->io.offset, &req->qiov, 0, hv_drive_piece_done, req);
        } else {
            blk_aio_pwritev(blk, req->io.offset, &req->qiov, req->io.fua ? BDRV_REQ_FUA : 0,
                            hv_drive_piece_done, req);
        }
        break;
    case HVSTOR_BLOCK_FLUSH:
        blk_aio_flush(blk, hv_drive_piece_done, req);
        break;
    case HVSTOR_BLOCK_DISCARD:
    case HVSTOR_BLOCK_WRITE_ZEROES:
        hv_drive_start_ranged(req);
        break;
    default:
        hv_drive_piece_done(req, -EINVAL);
        break;
    }
}

/* Bottom half in the drive's AioContext: starts what the workers queued, oldest first. */
static void hv_drive_run(void *opaque)
{
    HvDrive *drv = opaque;
    QSLIST_HEAD(, HvDriveReq) taken, ordered = QSLIST_HEAD_INITIALIZER(ordered);
    HvDriveReq *req;

    QSLIST_MOVE_ATOMIC(&taken, &drv->pending);
    while ((req = QSLIST_FIRST(&taken))) {
        QSLIST_REMOVE_HEAD(&taken, next);
        QSLIST_INSERT_HEAD(&ordered, req, next);
    }
    while ((req = QSLIST_FIRST(&ordered))) {
        QSLIST_REMOVE_HEAD(&ordered, next);
        hv_drive_start(req);
        /* The block layer counts it from here on (see hv_drive_submit). */
        blk_dec_in_flight(drv->blk);
    }
}

/* The drive's AioContext, once the VM runs again: the held requests start again, in order. */
static void hv_drive_retry(void *opaque)
{
    HvDrive *drv = opaque;
    QSIMPLEQ_HEAD(, HvDriveReq) again = QSIMPLEQ_HEAD_INITIALIZER(again);
    HvDriveReq *req;

    QSIMPLEQ_CONCAT(&again, &drv->held);
    while ((req = QSIMPLEQ_FIRST(&again))) {
        QSIMPLEQ_REMOVE_HEAD(&again, held_next);
        req->ret = 0;
        hv_drive_start(req);
    }
}

/* The drive's AioContext: every held request completes with its error. */
static void hv_drive_release_bh(void *opaque)
{
    HvDrive *drv = opaque;
    HvDriveReq *req;

    while ((req = QSIMPLEQ_FIRST(&drv->held))) {
        QSIMPLEQ_REMOVE_HEAD(&drv->held, held_next);
        hv_drive_finish(req);
    }
}

void hv_drive_release_held(HvDrive *drv)
{
    if (drv) {
        aio_wait_bh_oneshot(drv->ctx, hv_drive_release_bh, drv);
    }
}

/* Main loop: the VM runs again after an I/O error stopped it (or any stop). */
static void hv_drive_run_state(void *opaque, bool running, RunState state)
{
    HvDrive *drv = opaque;

    if (running) {
        qemu_bh_schedule(drv->retry_bh);
    }
}

/* HvstorBlockOps.submit: any thread, never blocks. */
static void hv_drive_submit(void *opaque, const HvstorBlockIo *io, void *token)
{
    HvDrive *drv = opaque;
    HvDriveReq *req = g_new0(HvDriveReq, 1);

    req->drv = drv;
    req->io = *io;
    req->token = token;
    qatomic_inc(&drv->outstanding);
    /* Counted while queued, so blk_drain and drained sections wait for it too. */
    blk_inc_in_flight(drv->blk);
    QSLIST_INSERT_HEAD_ATOMIC(&drv->pending, req, next);
    qemu_bh_schedule(drv->bh);
}

/* HvstorBlockOps.drain: the main thread, when the disk is freed. */
static void hv_drive_drain(void *opaque)
{
    HvDrive *drv = opaque;

    /* A request werror/rerror held will not start again: its error is its answer. */
    hv_drive_release_held(drv);
    blk_drain(drv->blk);
    /* Polls the main loop meanwhile, so a drained section of others can end. */
    AIO_WAIT_WHILE(drv->ctx, qatomic_read(&drv->outstanding) > 0);
}

/*
 * HvstorBlockOps.length: the main thread, inside the disk's resize. Never polls: the
 * resize bottom half below could run in a nested poll and resize the disk re-entrantly.
 */
static uint64_t hv_drive_length(void *opaque)
{
    HvDrive *drv = opaque;

    return qatomic_read(&drv->length);
}

/* Main loop: the node's new length, then the disk's. */
static void hv_drive_resize_bh(void *opaque)
{
    HvDrive *drv = opaque;
    int64_t len = blk_getlength(drv->blk);

    if (len < 0) {
        return;
    }
    qatomic_set(&drv->length, len);
    drv->resized(drv->resized_opaque, len);
}

/*
 * block_resize of the node: called in the drive's IOThread, inside the block layer's
 * coroutine; the disk is told from the main loop.
 */
static void hv_drive_resize_cb(void *opaque)
{
    HvDrive *drv = opaque;

    qemu_bh_schedule(drv->resize_bh);
}

static const BlockDevOps hv_drive_dev_ops = {
    .resize_cb = hv_drive_resize_cb,
};

HvDrive *hv_drive_new(BlockConf *conf, IOThread *iothread, bool read_only,
                      HvDriveResized *resized, void *opaque,
                      HvstorBlockOps *ops, Error **errp)
{
    BlockBackend *blk = conf->blk;
    g_autofree char *id = g_strdup_printf("hv-drive%u", drive_count++);
    HvDrive *drv;
    int64_t size;

    read_only = read_only || !blk_supports_write_perm(blk);
    /* rerror=, werror= (auto: the drive's own, -drive's rerror/werror or report/enospc). */
    if (!blkconf_apply_backend_options(conf, read_only, true, errp)) {
        return NULL;
    }
    /* query-block's io-status, and what an error action records in it. */
    blk_iostatus_enable(blk);
    size = blk_getlength(blk);
    if (size < 0) {
        error_setg_errno(errp, -size, "drive %s: cannot get its length", blk_name(blk));
        return NULL;
    }

    drv = g_new0(HvDrive, 1);
    drv->blk = blk;
    if (!iothread) {
        drv->own_iothread = iothread_create(id, errp);
        if (!drv->own_iothread) {
            g_free(drv);
            return NULL;
        }
        iothread = drv->own_iothread;
    }
    drv->ctx = iothread_get_aio_context(iothread);
    if (blk_set_aio_context(blk, drv->ctx, errp) < 0) {
        if (drv->own_iothread) {
            iothread_destroy(drv->own_iothread);
        }
        g_free(drv);
        return NULL;
    }
    drv->bh = aio_bh_new(drv->ctx, hv_drive_run, drv);
    drv->retry_bh = aio_bh_new(drv->ctx, hv_drive_retry, drv);
    QSIMPLEQ_INIT(&drv->held);
    drv->run_state = qemu_add_vm_change_state_handler(hv_drive_run_state, drv);
    drv->length = size;
    drv->resize_bh = qemu_bh_new(hv_drive_resize_bh, drv);
    drv->resized = resized;
    drv->resized_opaque = opaque;
    blk_set_dev_ops(blk, &hv_drive_dev_ops, drv);
    drv->name = g_strdup_printf("drive:%s%s", blk_name(blk), read_only ? " (read-only)" : "");

    *ops = (HvstorBlockOps) {
        .opaque = drv,
        .size = size,
        .read_only = read_only,
        .name = drv->name,
        .submit = hv_drive_submit,
        .drain = hv_drive_drain,
        .length = hv_drive_length,
    };
    return drv;
}

/* In the drive's AioContext: no run of hv_drive_run can be under way. */
static void hv_drive_delete_bh(void *opaque)
{
    HvDrive *drv = opaque;

    qemu_bh_delete(drv->bh);
    qemu_bh_delete(drv->retry_bh);
}

void hv_drive_free(HvDrive *drv)
{
    Error *err = NULL;

    if (!drv) {
        return;
    }
    /* Nothing is queued or held: the disk was freed, which drained the drive. */
    assert(QSLIST_EMPTY(&drv->pending) && drv->outstanding == 0 && QSIMPLEQ_EMPTY(&drv->held));
    qemu_del_vm_change_state_handler(drv->run_state);
    blk_set_dev_ops(drv->blk, NULL, NULL);
    qemu_bh_delete(drv->resize_bh);
    /*
     * Deleted from its own AioContext: a run already taken off the list by the IOThread
     * (scheduled twice, the second run finding nothing) must be over before drv goes.
     */
    aio_wait_bh_oneshot(drv->ctx, hv_drive_delete_bh, drv);
    /* Back to the main loop, where the drive lives between users. */
    if (blk_set_aio_context(drv->blk, qemu_get_aio_context(), &err) < 0) {
        /* Others' I/O on the node may still run in it: leave the IOThread alive. */
        warn_report_err(err);
    } else if (drv->own_iothread) {
        iothread_destroy(drv->own_iothread);
    }
    g_free(drv->name);
    g_free(drv);
}
