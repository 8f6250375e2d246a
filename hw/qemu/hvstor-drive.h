/*
 * hv-disk's drive=: a QEMU BlockBackend as the disk's storage (hvstor-drive.c).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef HW_HVSTOR_DRIVE_H
#define HW_HVSTOR_DRIVE_H

#include "hw/block/block.h"
#include "system/iothread.h"
#include "hvstor/capi.h"

typedef struct HvDrive HvDrive;
/* The drive's node changed its length (QMP block_resize): main loop, BQL held. */
typedef void HvDriveResized(void *opaque, uint64_t bytes);

/*
 * Main thread. Takes conf->blk's permissions (read-only when asked or when the drive is;
 * others may resize it), moves it to `iothread`'s AioContext (an IOThread of its own when
 * NULL) and fills ops for HvstorDiskConfig.block. `resized(opaque, bytes)` is told when
 * the node's length changes. NULL with errp set on failure.
 */
HvDrive *hv_drive_new(BlockConf *conf, IOThread *iothread, bool read_only,
                      HvDriveResized *resized, void *opaque,
                      HvstorBlockOps *ops, Error **errp);
/*
 * Main thread: the requests werror/rerror held (the VM stopped on their error) complete now
 * with their errors, instead of starting again when the VM runs. For a machine reset and
 * the disk's unplug. Returns once they have. NULL: nothing.
 */
void hv_drive_release_held(HvDrive *drv);
/* Main thread, after the disk built on ops was freed (which drained it). NULL: nothing. */
void hv_drive_free(HvDrive *drv);

#endif
