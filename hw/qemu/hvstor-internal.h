/*
 * The parts of the glue its files share (not for the rest of QEMU):
 *   hvstor-host.c  guest memory (read, write, atomic OR, map, unmap)
 *   hvstor-irq.c   vectors to VPs, from vCPU or device threads
 *   hvstor-kvm.c   MSR filter and CPUID leaves under KVM
 *   hvstor-trace.c guest-error lines and trace events
 *   hvstor-props.c property descriptions, the model's errors as QEMU's
 *   hvstor-objects.c -object hv-disk-model, hv-vm-caps, hv-fault
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
/*
 * Fills guest_error of ops (LOG_GUEST_ERROR) and sets the model's process-wide trace hook
 * (its events to QEMU's trace backends).
 */
void hv_host_log_ops(HvstorHostOps *ops);

/* Vectors raised by device threads, delivered by a bottom half: 256 bits per VP. */
typedef struct HvIrq {
    uint64_t *pending_vectors;
    uint32_t nr_vps;
    QEMUBH *bh;
    bool held; /* the VM is stopped: the bottom half leaves vectors pending */
} HvIrq;

void hv_irq_init(HvIrq *irq, uint32_t nr_vps);
void hv_irq_cleanup(HvIrq *irq);
/* HvstorHostOps.raise_vector, with the HvIrq as opaque. Any thread. */
void hv_irq_raise(void *opaque, uint32_t vp, uint8_t vector);
/*
 * The VM stopped (false) or runs again (true); main loop. Told of a stop after the device
 * model holds still (no device thread raises a vector any more): a vector raised before
 * the stop and left to the bottom half goes to its APIC then, where a savevm or a
 * migration finds it. One raised while the VM is stopped (a system_reset then) waits for
 * the VM to run.
 */
void hv_irq_set_running(HvIrq *irq, bool running);
/* A loadvm: vectors left pending belong to the machine before it, not the loaded guest. */
void hv_irq_drop_pending(HvIrq *irq);

/*
 * Under KVM: routes the Hyper-V MSRs to vb and installs its CPUID leaves on every
 * vCPU. False with a message in errp when KVM refuses either.
 */
bool hv_kvm_init(HvstorVmbus *vb, Error **errp);

/* A property's description, for -device X,help and device-list-properties. */
typedef struct HvPropDoc {
    const char *name;
    const char *text;
} HvPropDoc;

/* Sets the description of each property docs names (ended by { NULL }) on klass. */
void hv_describe_props(ObjectClass *klass, const HvPropDoc *docs);

/*
 * Sets errp to "WHAT: ERR", WHAT formatted from fmt, ERR a message of the model (malloc()ed,
 * freed here; NULL when the model ran out of memory).
 */
void hv_model_error(Error **errp, char *err, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
/*
 * A "stats" property's value: the model's JSON (malloc()ed, freed here; NULL: none to give)
 * visited as the JSON object it is, so that qom-get returns an object, not a string.
 */
void hv_visit_stats(Visitor *v, const char *name, char *json, const char *what, Error **errp);
/* The same as a warning or an error on stderr, where no caller takes an Error. */
void hv_model_report(bool warning, char *err, const char *fmt, ...) G_GNUC_PRINTF(3, 4);

/* Settings as objects (hvstor-objects.c). */
#define TYPE_HV_DISK_MODEL "hv-disk-model"
#define TYPE_HV_VM_CAPS "hv-vm-caps"
#define TYPE_HV_FAULT "hv-fault"

/*
 * The settings text a property `what` (perf, vm-perf, fault) stands for: `value` itself when
 * it is text (it holds a '=', or is "" or "none"), else the id of an -object of `type`,
 * whose settings it returns (the object's; valid while it exists). With `model` (perf=): an
 * hv-disk-model's shared model goes there and "" is returned; NULL there otherwise. NULL with
 * errp set when no object of that type has the id.
 */
const char *hv_settings_resolve(const char *type, const char *what, const char *value,
                                HvstorDiskModel **model, Error **errp);

#endif
