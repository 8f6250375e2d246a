/*
 * Guest memory for the hv-storvsc device model: the memory half of the Host the
 * C++ side is built on (include/hvstor/capi.h, HvstorHostOps). Copies in and out
 * of guest RAM, the atomic OR the SynIC uses for event flags, and pages mapped
 * for direct access by device threads. Called from vCPU and device threads.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/rcu.h"
#include "exec/address-spaces.h"
#include "exec/memory.h"
#include "exec/ramblock.h"
#include "hvstor-internal.h"

/*
 * Guest RAM access. The whole range is checked to be RAM (not MMIO, not ROM
 * for writes) before anything is copied, so a failed access touches nothing.
 */
static bool gpa_range_ok(uint64_t gpa, size_t len, bool is_write)
{
    if (len > UINT64_MAX - gpa) {
        return false;
    }
    while (len) {
        hwaddr xlat, l = len;
        MemoryRegion *mr = address_space_translate(&address_space_memory, gpa,
                                                   &xlat, &l, is_write,
                                                   MEMTXATTRS_UNSPECIFIED);
        if (!memory_region_is_ram(mr) || memory_region_is_ram_device(mr) ||
            (is_write && memory_region_is_rom(mr)) || l == 0) {
            return false;
        }
        gpa += l;
        len -= l;
    }
    return true;
}

static bool gpa_copy(uint64_t gpa, void *buf, size_t len, bool is_write)
{
    RCU_READ_LOCK_GUARD();
    if (!gpa_range_ok(gpa, len, is_write)) {
        return false;
    }
    /* QEMU's accessors keep dirty tracking and TCG's code invalidation right. */
    return address_space_rw(&address_space_memory, gpa, MEMTXATTRS_UNSPECIFIED,
                            buf, len, is_write) == MEMTX_OK;
}

static bool host_read_gpa(void *opaque, uint64_t gpa, void *dst, size_t len)
{
    return gpa_copy(gpa, dst, len, false);
}

static bool host_write_gpa(void *opaque, uint64_t gpa, const void *src, size_t len)
{
    return gpa_copy(gpa, (void *)src, len, true);
}

static bool host_atomic_or_u32(void *opaque, uint64_t gpa, uint32_t mask)
{
    hwaddr xlat, l = 4;
    MemoryRegion *mr;

    if (gpa & 3) {
        return false;
    }
    RCU_READ_LOCK_GUARD();
    mr = address_space_translate(&address_space_memory, gpa, &xlat, &l, true,
                                 MEMTXATTRS_UNSPECIFIED);
    if (!memory_region_is_ram(mr) || memory_region_is_ram_device(mr) ||
        memory_region_is_rom(mr) || l < 4) {
        return false;
    }
    qatomic_or((uint32_t *)qemu_map_ram_ptr(mr->ram_block, xlat),
               cpu_to_le32(mask));
    memory_region_set_dirty(mr, xlat, 4);
    return true;
}

/*
 * A page of guest RAM for direct access by device threads, pinned by a reference on
 * its memory region until host_unmap().
 */
static void *host_map(void *opaque, uint64_t gpa, size_t len, bool writable)
{
    hwaddr xlat, l = len;
    MemoryRegion *mr;

    if (len == 0 || (gpa & 4095) + len > 4096) {
        return NULL;
    }
    RCU_READ_LOCK_GUARD();
    mr = address_space_translate(&address_space_memory, gpa, &xlat, &l, writable,
                                 MEMTXATTRS_UNSPECIFIED);
    if (!memory_region_is_ram(mr) || memory_region_is_ram_device(mr) ||
        (writable && memory_region_is_rom(mr)) || l < len) {
        return NULL;
    }
    memory_region_ref(mr);
    return qemu_map_ram_ptr(mr->ram_block, xlat);
}

static void host_unmap(void *opaque, void *ptr, size_t len, bool written)
{
    /* Drops the reference, and marks the range dirty (invalidating TCG code) if written. */
    address_space_unmap(&address_space_memory, ptr, len, written, written ? len : 0);
}

/*
 * The model's own threads (channel workers, backend completion threads, the perf model's
 * timer) call the functions above, which take the RCU read lock: RCU must know them, or a
 * memory map change frees the FlatView they are reading.
 */
static void thread_enter(void)
{
    rcu_register_thread();
}

static void thread_leave(void)
{
    rcu_unregister_thread();
}

void hv_host_thread_hooks(void)
{
    hvstor_set_thread_hooks(thread_enter, thread_leave);
}

/*
 * A mapping still in use (a channel's ring, a request's buffer) written since it was made:
 * dirty in QEMU's log now, as address_space_unmap marks it at the end. The model calls it
 * when the VM stops, before a migration's last pass.
 */
static void host_mark_written(void *opaque, void *ptr, size_t len)
{
    ram_addr_t offset;
    RAMBlock *rb;

    RCU_READ_LOCK_GUARD();
    rb = qemu_ram_block_from_host(ptr, false, &offset);
    if (rb) {
        memory_region_set_dirty(rb->mr, offset, len);
    }
}

void hv_host_memory_ops(HvstorHostOps *ops)
{
    ops->mark_written = host_mark_written;
    ops->read_gpa = host_read_gpa;
    ops->write_gpa = host_write_gpa;
    ops->atomic_or_u32 = host_atomic_or_u32;
    ops->map = host_map;
    ops->unmap = host_unmap;
}
