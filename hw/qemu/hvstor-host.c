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
/*
 * Writable mappings in use, by host page. QEMU's dirty log sees the model's writes through
 * its accessors and at unmap, but a channel's ring pages stay mapped while it is open: a
 * migration's earlier passes may have sent them before the model wrote them. When the VM
 * stops (before the migration's last pass) every page mapped writable is marked dirty,
 * so that pass sends it as the model left it.
 */
typedef struct HvMapped {
    MemoryRegion *mr;
    hwaddr offset; /* of the page in mr */
    unsigned count;
} HvMapped;

static QemuMutex mapped_lock;
static GHashTable *mapped; /* page-aligned host pointer -> HvMapped */

static void mapped_init(void)
{
    static bool done;

    if (!done) {
        qemu_mutex_init(&mapped_lock);
        mapped = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, g_free);
        done = true;
    }
}

static void *page_of(void *ptr)
{
    return (void *)((uintptr_t)ptr & ~(uintptr_t)4095);
}

static void mapped_add(void *ptr, MemoryRegion *mr, hwaddr xlat)
{
    HvMapped *m;

    qemu_mutex_lock(&mapped_lock);
    m = g_hash_table_lookup(mapped, page_of(ptr));
    if (!m) {
        m = g_new0(HvMapped, 1);
        m->mr = mr;
        m->offset = xlat & ~(hwaddr)4095;
        g_hash_table_insert(mapped, page_of(ptr), m);
    }
    m->count++;
    qemu_mutex_unlock(&mapped_lock);
}

static void mapped_remove(void *ptr)
{
    HvMapped *m;

    qemu_mutex_lock(&mapped_lock);
    m = g_hash_table_lookup(mapped, page_of(ptr));
    if (m && --m->count == 0) {
        g_hash_table_remove(mapped, page_of(ptr));
    }
    qemu_mutex_unlock(&mapped_lock);
}

void hv_host_dirty_mapped(void)
{
    GHashTableIter it;
    gpointer key, value;

    mapped_init();
    qemu_mutex_lock(&mapped_lock);
    g_hash_table_iter_init(&it, mapped);
    while (g_hash_table_iter_next(&it, &key, &value)) {
        HvMapped *m = value;

        memory_region_set_dirty(m->mr, m->offset, 4096);
    }
    qemu_mutex_unlock(&mapped_lock);
}

static void *host_map(void *opaque, uint64_t gpa, size_t len, bool writable)
{
    void *ptr;
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
    ptr = qemu_map_ram_ptr(mr->ram_block, xlat);
    if (writable) {
        mapped_add(ptr, mr, xlat);
    }
    return ptr;
}

static void host_unmap(void *opaque, void *ptr, size_t len, bool written)
{
    if (written) {
        mapped_remove(ptr);
    }
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

void hv_host_memory_ops(HvstorHostOps *ops)
{
    mapped_init();
    ops->read_gpa = host_read_gpa;
    ops->write_gpa = host_write_gpa;
    ops->atomic_or_u32 = host_atomic_or_u32;
    ops->map = host_map;
    ops->unmap = host_unmap;
}
