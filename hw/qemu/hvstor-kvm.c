/*
 * The KVM path of the hv-vmbus-bridge (unverified: the hosts this is developed on
 * cannot run stock guests under KVM). The same partition answers; only the plumbing
 * differs:
 * - MSRs 0x40000000-0x400001FF exit to userspace through an MSR filter range;
 * - the Hyper-V CPUID leaves replace KVM's on every vCPU with KVM_SET_CPUID2, which
 *   KVM accepts until a vCPU first runs (devices are realized before that);
 * - the hypercall page's OUT already exits to QEMU under KVM.
 * Built only when QEMU has KVM (meson.build).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qapi/error.h"
#include "hw/core/cpu.h"
#include "system/kvm.h"
#include "cpu.h"
#include "kvm/kvm_i386.h"
#include <linux/kvm.h>
#include "hvstor-internal.h"

/* The MSR filter's callbacks carry no opaque: the machine has one partition. */
static HvstorVmbus *kvm_vb;

static bool kvm_hv_rdmsr(X86CPU *cpu, uint32_t msr, uint64_t *val)
{
    return hvstor_rdmsr(kvm_vb, CPU(cpu)->cpu_index, msr, val) == HVSTOR_MSR_HANDLED;
}

static bool kvm_hv_wrmsr(X86CPU *cpu, uint32_t msr, uint64_t val)
{
    return hvstor_wrmsr(kvm_vb, CPU(cpu)->cpu_index, msr, val) == HVSTOR_MSR_HANDLED;
}

#define HV_KVM_MAX_CPUID 256

typedef struct {
    struct kvm_cpuid2 cpuid;
    struct kvm_cpuid_entry2 entries[HV_KVM_MAX_CPUID];
} HvKvmCpuid;

typedef struct {
    HvstorVmbus *vb;
    int ret;
} HvKvmCpuidJob;

static void kvm_set_hv_cpuid(CPUState *cs, run_on_cpu_data data)
{
    HvKvmCpuidJob *job = data.host_ptr;
    g_autofree HvKvmCpuid *c = g_new0(HvKvmCpuid, 1);
    uint32_t n = 0, leaf;

    c->cpuid.nent = HV_KVM_MAX_CPUID;
    job->ret = kvm_vcpu_ioctl(cs, KVM_GET_CPUID2, &c->cpuid);
    if (job->ret) {
        return;
    }
    for (uint32_t i = 0; i < c->cpuid.nent; i++) {
        struct kvm_cpuid_entry2 *e = &c->entries[i];
        if (e->function >= 0x40000000 && e->function <= 0x4000FFFF) {
            continue; /* KVM's own signature and leaves go */
        }
        hvstor_cpuid(job->vb, e->function, e->index, &e->eax, &e->ebx, &e->ecx, &e->edx);
        c->entries[n++] = *e;
    }
    for (leaf = 0x40000000; leaf <= 0x40000005 && n < HV_KVM_MAX_CPUID; leaf++) {
        struct kvm_cpuid_entry2 *e = &c->entries[n++];
        memset(e, 0, sizeof(*e));
        e->function = leaf;
        hvstor_cpuid(job->vb, leaf, 0, &e->eax, &e->ebx, &e->ecx, &e->edx);
    }
    c->cpuid.nent = n;
    job->ret = kvm_vcpu_ioctl(cs, KVM_SET_CPUID2, &c->cpuid);
}

bool hv_kvm_init(HvstorVmbus *vb, Error **errp)
{
    CPUState *cs;
    int r;

    warn_report("hv-vmbus-bridge: the KVM path is unverified; TCG is the tested one");
    kvm_vb = vb;
    r = kvm_filter_msr_range(kvm_state, 0x40000000, 0x200, kvm_hv_rdmsr, kvm_hv_wrmsr);
    if (r) {
        error_setg(errp, "hv-vmbus-bridge: KVM refused an MSR filter for the Hyper-V "
                   "MSRs (%s); it needs KVM_CAP_X86_USER_SPACE_MSR", strerror(-r));
        return false;
    }
    CPU_FOREACH(cs) {
        HvKvmCpuidJob job = { .vb = vb };
        run_on_cpu(cs, kvm_set_hv_cpuid, RUN_ON_CPU_HOST_PTR(&job));
        if (job.ret) {
            error_setg(errp, "hv-vmbus-bridge: setting the Hyper-V CPUID leaves on vCPU %d "
                       "failed: %s", cs->cpu_index, strerror(-job.ret));
            return false;
        }
    }
    return true;
}
