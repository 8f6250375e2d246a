/*
 * Interrupt delivery for the hv-storvsc device model: the raise_vector half of the
 * Host (include/hvstor/capi.h). A vector goes to a VP's local APIC as a fixed MSI:
 * at once from a vCPU thread, and from a device thread that finds the BQL free
 * (hw/qemu/patches/0004); through a main-loop bottom half otherwise.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/main-loop.h"
#include "exec/address-spaces.h"
#include "exec/memory.h"
#include "hw/core/cpu.h"
#include "cpu.h"
#include "hvstor-internal.h"
#include "trace.h"

/* A fixed, edge-triggered MSI to the VP's local APIC. Needs the BQL. */
static void send_vector(uint32_t vp, uint8_t vector)
{
    CPUState *cs = qemu_get_cpu(vp);

    if (cs) {
        address_space_stl_le(&address_space_memory,
                             0xFEE00000ULL | ((uint64_t)X86_CPU(cs)->apic_id << 12),
                             vector, MEMTXATTRS_UNSPECIFIED, NULL);
    }
}

/* Every vector left pending, to the APICs. Needs the BQL. at_stop: the VM has just stopped. */
static void send_pending(HvIrq *irq, bool at_stop)
{
    for (uint32_t vp = 0; vp < irq->nr_vps; vp++) {
        for (int w = 0; w < 4; w++) {
            uint64_t bits = qatomic_xchg(&irq->pending_vectors[vp * 4 + w], 0);
            while (bits) {
                int b = ctz64(bits);
                bits &= bits - 1;
                if (at_stop) {
                    trace_hvstor_irq_at_stop(vp, w * 64 + b);
                }
                send_vector(vp, w * 64 + b);
            }
        }
    }
}

static void raise_bh(void *opaque)
{
    HvIrq *irq = opaque;

    if (qatomic_read(&irq->held)) {
        return; /* hv_irq_set_running schedules it again */
    }
    send_pending(irq, false);
}

void hv_irq_init(HvIrq *irq, uint32_t nr_vps)
{
    irq->nr_vps = nr_vps;
    irq->pending_vectors = g_new0(uint64_t, (size_t)nr_vps * 4);
    irq->bh = qemu_bh_new(raise_bh, irq);
}

void hv_irq_set_running(HvIrq *irq, bool running)
{
    qatomic_set(&irq->held, !running);
    if (running) {
        qemu_bh_schedule(irq->bh);
        return;
    }
    /*
     * A vector raised before the stop and left to the bottom half goes to its APIC now,
     * as it would have a moment earlier: the APIC's state is saved and migrated, our
     * pending set is not. Left here, a savevm or migration would lose it, and a guest
     * whose event flag is set with no interrupt to make it look waits for good.
     */
    send_pending(irq, true);
}

void hv_irq_drop_pending(HvIrq *irq)
{
    for (uint32_t i = 0; i < irq->nr_vps * 4; i++) {
        qatomic_set(&irq->pending_vectors[i], 0);
    }
}

void hv_irq_cleanup(HvIrq *irq)
{
    if (irq->bh) {
        qemu_bh_delete(irq->bh);
        irq->bh = NULL;
    }
    g_free(irq->pending_vectors);
    irq->pending_vectors = NULL;
    irq->nr_vps = 0;
}

/*
 * vCPU threads hold the BQL and deliver at once. Device threads never wait for the
 * BQL (a thread holding it may be waiting for them: a machine reset for the channels'
 * closes, a disk's removal for the workers' batches): when it is free they take it and
 * deliver, kicking the vCPU themselves; when not, they set the vector pending and a
 * bottom half delivers it.
 */
void hv_irq_raise(void *opaque, uint32_t vp, uint8_t vector)
{
    HvIrq *irq = opaque;

    if (vp >= irq->nr_vps) {
        return;
    }
    if (bql_locked()) {
        send_vector(vp, vector);
        return;
    }
    if (bql_trylock()) {
        send_vector(vp, vector);
        bql_unlock();
        return;
    }
    qatomic_or(&irq->pending_vectors[vp * 4 + vector / 64], 1ULL << (vector % 64));
    qemu_bh_schedule(irq->bh);
}
