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

/*
 * Main thread. Takes conf->blk's permissions (read-only when asked or when the drive is),
 * moves it to `iothread`'s AioContext (an IOThread of its own when NULL) and fills ops for
 * HvstorDiskConfig.block. NULL with errp set on failure.
 */
HvDrive *hv_drive_new(BlockConf *conf, IOThread *iothread, bool read_only,
                      HvstorBlockOps *ops, Error **errp);
/* Main thread, after the disk built on ops was freed (which drained it). NULL: nothing. */
void hv_drive_free(HvDrive *drv);

#endif
