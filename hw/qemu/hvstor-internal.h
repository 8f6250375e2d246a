/*
 * The parts of the hv-vmbus-bridge, for the glue's own files only:
 *   hvstor-host.c  guest memory (read, write, atomic OR, map, unmap)
 *   hvstor-irq.c   vectors to VPs, from vCPU or device threads
 *   hvstor-kvm.c   MSR filter and CPUID leaves under KVM
 *   hvstor-trace.c guest-error lines and trace events
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef HW_HVSTOR_INTERNAL_H
#define HW_HVSTOR_INTERNAL_H

#include "qapi/error.h"
#include "hvstor/capi.h"

/* Fills the memory operations of ops; opaque and raise_vector are the caller's. */
void hv_host_memory_ops(HvstorHostOps *ops);
/* Registers the model's threads with RCU; once, before any device exists. */
void hv_host_thread_hooks(void);
/* Fills guest_error (LOG_GUEST_ERROR) and trace (QEMU's trace backends) of ops. */
void hv_host_log_ops(HvstorHostOps *ops);

/* Vectors raised by device threads, delivered by a bottom half: 256 bits per VP. */
typedef struct HvIrq {
    uint64_t *pending_vectors;
    uint32_t nr_vps;
    QEMUBH *bh;
} HvIrq;

void hv_irq_init(HvIrq *irq, uint32_t nr_vps);
void hv_irq_cleanup(HvIrq *irq);
/* HvstorHostOps.raise_vector, with the HvIrq as opaque. Any thread. */
void hv_irq_raise(void *opaque, uint32_t vp, uint8_t vector);

/*
 * Under KVM: routes the Hyper-V MSRs to vb and installs its CPUID leaves on every
 * vCPU. False with a message in errp when KVM refuses either.
 */
bool hv_kvm_init(HvstorVmbus *vb, Error **errp);

#endif
