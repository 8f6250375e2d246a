/*
 * hv-vmbus-bridge: QEMU glue for the hv-storvsc Hyper-V partition and VMBus
 * server (C++, built as libhvstor.a). This file only adapts QEMU to the C
 * interface in include/hvstor/capi.h: guest memory, interrupts, the
 * hypercall port, CPUID and MSR hooks, ACPI, reset.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qemu/module.h"
#include "qapi/error.h"
#include "exec/address-spaces.h"
#include "exec/memory.h"
#include "hw/boards.h"
#include "hw/isa/isa.h"
#include "hw/qdev-properties.h"
#include "hw/acpi/acpi_aml_interface.h"
#include "hw/acpi/aml-build.h"
#include "system/hw_accel.h"
#include "system/tcg.h"
#include "cpu.h"
#include "hw/i386/hvstor-hooks.h"
#include "qemu/error-report.h"
#ifdef CONFIG_KVM
#include "system/kvm.h"
#include "kvm/kvm_i386.h"
#include <linux/kvm.h>
#endif
#include "hvstor-vmbus.h"
#include "hvstor/capi.h"

OBJECT_DECLARE_SIMPLE_TYPE(HvVmbusBridge, HV_VMBUS_BRIDGE)

struct HvVmbusBridge {
    ISADevice parent_obj;
    uint32_t hypercall_port;
    char *vmbus_version;
    char *vm_perf;
    MemoryRegion io;
    HvstorVmbus *vb;
    /* Vectors raised by device threads, delivered by a bottom half: 256 bits per VP. */
    uint64_t *pending_vectors;
    uint32_t nr_vps;
    QEMUBH *raise_bh;
};

/* The one partition: CPUID and MSR hooks are machine-wide. */
static HvVmbusBridge *the_bridge;

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

static void raise_bh(void *opaque)
{
    HvVmbusBridge *s = opaque;

    for (uint32_t vp = 0; vp < s->nr_vps; vp++) {
        for (int w = 0; w < 4; w++) {
            uint64_t bits = qatomic_xchg(&s->pending_vectors[vp * 4 + w], 0);
            while (bits) {
                int b = ctz64(bits);
                bits &= bits - 1;
                send_vector(vp, w * 64 + b);
            }
        }
    }
}

/*
 * vCPU threads hold the BQL and deliver at once. Device threads never wait for the
 * BQL (a vCPU thread may hold it while waiting for them to stop a channel): they set
 * the vector pending and a bottom half delivers it.
 */
static void host_raise_vector(void *opaque, uint32_t vp, uint8_t vector)
{
    HvVmbusBridge *s = opaque;

    if (vp >= s->nr_vps) {
        return;
    }
    if (bql_locked()) {
        send_vector(vp, vector);
        return;
    }
    qatomic_or(&s->pending_vectors[vp * 4 + vector / 64], 1ULL << (vector % 64));
    qemu_bh_schedule(s->raise_bh);
}

static void hook_cpuid(CPUX86State *env, uint32_t index, uint32_t count,
                       uint32_t *eax, uint32_t *ebx, uint32_t *ecx, uint32_t *edx)
{
    hvstor_cpuid(the_bridge->vb, index, count, eax, ebx, ecx, edx);
}

static int hook_rdmsr(CPUX86State *env, uint32_t msr, uint64_t *val)
{
    return hvstor_rdmsr(the_bridge->vb, env_cpu(env)->cpu_index, msr, val);
}

static int hook_wrmsr(CPUX86State *env, uint32_t msr, uint64_t val)
{
    return hvstor_wrmsr(the_bridge->vb, env_cpu(env)->cpu_index, msr, val);
}

static const HvstorCpuHooks cpu_hooks = {
    .cpuid = hook_cpuid,
    .rdmsr = hook_rdmsr,
    .wrmsr = hook_wrmsr,
};

/*
 * The hypercall page ends in an OUT to our port (see Partition::hypercall_stub):
 * RCX = control, R11 = input (the guest's RDX), R8 = output; result in RAX.
 */
static void hypercall_port_write(void *opaque, hwaddr addr, uint64_t data,
                                 unsigned size)
{
    HvVmbusBridge *s = opaque;
    CPUState *cs = current_cpu;
    CPUX86State *env;

    if (!cs) {
        return;
    }
    cpu_synchronize_state(cs);
    env = cpu_env(cs);
    env->regs[R_EAX] = hvstor_hypercall(s->vb, cs->cpu_index, env->regs[R_ECX],
                                        env->regs[R_R11], env->regs[R_R8]);
}

static uint64_t hypercall_port_read(void *opaque, hwaddr addr, unsigned size)
{
    return ~0ULL;
}

static const MemoryRegionOps hypercall_port_ops = {
    .read = hypercall_port_read,
    .write = hypercall_port_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 1, .max_access_size = 4 },
    .impl = { .min_access_size = 1, .max_access_size = 4 },
};

#ifdef CONFIG_KVM
/*
 * The KVM path (unverified: the hosts this is developed on cannot run stock guests
 * under KVM). The same partition answers; only the plumbing differs:
 * - MSRs 0x40000000-0x400001FF exit to userspace through an MSR filter range;
 * - the Hyper-V CPUID leaves replace KVM's on every vCPU with KVM_SET_CPUID2, which
 *   KVM accepts until a vCPU first runs (devices are realized before that);
 * - the hypercall page's OUT already exits to QEMU under KVM.
 */
static bool kvm_hv_rdmsr(X86CPU *cpu, uint32_t msr, uint64_t *val)
{
    return hvstor_rdmsr(the_bridge->vb, CPU(cpu)->cpu_index, msr, val) == HVSTOR_MSR_HANDLED;
}

static bool kvm_hv_wrmsr(X86CPU *cpu, uint32_t msr, uint64_t val)
{
    return hvstor_wrmsr(the_bridge->vb, CPU(cpu)->cpu_index, msr, val) == HVSTOR_MSR_HANDLED;
}

#define HV_KVM_MAX_CPUID 256

typedef struct {
    struct kvm_cpuid2 cpuid;
    struct kvm_cpuid_entry2 entries[HV_KVM_MAX_CPUID];
} HvKvmCpuid;

typedef struct {
    HvVmbusBridge *s;
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
        hvstor_cpuid(job->s->vb, e->function, e->index, &e->eax, &e->ebx, &e->ecx, &e->edx);
        c->entries[n++] = *e;
    }
    for (leaf = 0x40000000; leaf <= 0x40000005 && n < HV_KVM_MAX_CPUID; leaf++) {
        struct kvm_cpuid_entry2 *e = &c->entries[n++];
        memset(e, 0, sizeof(*e));
        e->function = leaf;
        hvstor_cpuid(job->s->vb, leaf, 0, &e->eax, &e->ebx, &e->ecx, &e->edx);
    }
    c->cpuid.nent = n;
    job->ret = kvm_vcpu_ioctl(cs, KVM_SET_CPUID2, &c->cpuid);
}

static bool hv_vmbus_bridge_kvm_init(HvVmbusBridge *s, Error **errp)
{
    CPUState *cs;
    int r;

    warn_report("hv-vmbus-bridge: the KVM path is unverified; TCG is the tested one");
    r = kvm_filter_msr_range(kvm_state, 0x40000000, 0x200, kvm_hv_rdmsr, kvm_hv_wrmsr);
    if (r) {
        error_setg(errp, "hv-vmbus-bridge: KVM refused an MSR filter for the Hyper-V "
                   "MSRs (%s); it needs KVM_CAP_X86_USER_SPACE_MSR", strerror(-r));
        return false;
    }
    CPU_FOREACH(cs) {
        HvKvmCpuidJob job = { .s = s };
        run_on_cpu(cs, kvm_set_hv_cpuid, RUN_ON_CPU_HOST_PTR(&job));
        if (job.ret) {
            error_setg(errp, "hv-vmbus-bridge: setting the Hyper-V CPUID leaves on vCPU %d "
                       "failed: %s", cs->cpu_index, strerror(-job.ret));
            return false;
        }
    }
    return true;
}
#endif

static void hv_vmbus_bridge_realize(DeviceState *dev, Error **errp)
{
    HvVmbusBridge *s = HV_VMBUS_BRIDGE(dev);
    MachineState *ms = MACHINE(qdev_get_machine());
    HvstorHostOps ops = {
        .opaque = s,
        .read_gpa = host_read_gpa,
        .write_gpa = host_write_gpa,
        .atomic_or_u32 = host_atomic_or_u32,
        .map = host_map,
        .unmap = host_unmap,
        .raise_vector = host_raise_vector,
    };
    uint32_t version;
    char *err = NULL;

    if (the_bridge) {
        error_setg(errp, "only one hv-vmbus-bridge per machine");
        return;
    }
    if (!tcg_enabled() && !kvm_enabled()) {
        error_setg(errp, "hv-vmbus-bridge: needs TCG or KVM");
        return;
    }
    if (!hvstor_parse_vmbus_version(s->vmbus_version, &version)) {
        error_setg(errp, "hv-vmbus-bridge: vmbus-version '%s' is not one of "
                   "5.3 5.2 5.1 5.0 4.1 4.0 3.0 2.4", s->vmbus_version);
        return;
    }
    if (s->hypercall_port == 0 || s->hypercall_port > 0xFFFC) {
        error_setg(errp, "hv-vmbus-bridge: hypercall-port must be 1..0xfffc");
        return;
    }
    if (ms->smp.max_cpus > 255) {
        error_setg(errp, "hv-vmbus-bridge: at most 255 vCPUs (xAPIC delivery)");
        return;
    }
    s->vb = hvstor_vmbus_new(&ops, ms->smp.max_cpus, s->hypercall_port, version, &err);
    if (!s->vb) {
        error_setg(errp, "hv-vmbus-bridge: %s", err ? err : "out of memory");
        free(err);
        return;
    }
    s->nr_vps = ms->smp.max_cpus;
    s->pending_vectors = g_new0(uint64_t, (size_t)s->nr_vps * 4);
    s->raise_bh = qemu_bh_new(raise_bh, s);
    if (s->vm_perf && *s->vm_perf && !hvstor_vmbus_set_vm_perf(s->vb, s->vm_perf, &err)) {
        error_setg(errp, "hv-vmbus-bridge: vm-perf: %s", err ? err : "out of memory");
        free(err);
        hvstor_vmbus_free(s->vb);
        s->vb = NULL;
        return;
    }
    memory_region_init_io(&s->io, OBJECT(dev), &hypercall_port_ops, s,
                          "hv-hypercall", 4);
    isa_register_ioport(ISA_DEVICE(dev), &s->io, s->hypercall_port);
    the_bridge = s;
    hvstor_cpu_hooks = &cpu_hooks;
#ifdef CONFIG_KVM
    if (kvm_enabled() && !hv_vmbus_bridge_kvm_init(s, errp)) {
        hvstor_cpu_hooks = NULL;
        the_bridge = NULL;
        return;
    }
#endif
}

static void hv_vmbus_bridge_reset(DeviceState *dev)
{
    HvVmbusBridge *s = HV_VMBUS_BRIDGE(dev);

    if (s->vb) {
        hvstor_vmbus_reset(s->vb);
    }
}

/* \_SB.VMBS with _HID "VMBus": without it hv_vmbus does not load. */
static void hv_vmbus_bridge_build_aml(AcpiDevAmlIf *adev, Aml *scope)
{
    Aml *sb = aml_scope("\\_SB");
    Aml *dev = aml_device("VMBS");
    Aml *crs = aml_resource_template();

    aml_append(dev, aml_name_decl("_HID", aml_string("VMBus")));
    aml_append(dev, aml_name_decl("_UID", aml_int(0)));
    aml_append(dev, aml_name_decl("_STA", aml_int(0xF)));
    /* The guest ignores IRQ resources on x86 but fails probe without a _CRS. */
    aml_append(crs, aml_irq_no_flags(7));
    aml_append(dev, aml_name_decl("_CRS", crs));
    aml_append(sb, dev);
    aml_append(scope, sb);
}

static const Property hv_vmbus_bridge_props[] = {
    DEFINE_PROP_UINT32("hypercall-port", HvVmbusBridge, hypercall_port,
                       HV_VMBUS_DEFAULT_HYPERCALL_PORT),
    DEFINE_PROP_STRING("vmbus-version", HvVmbusBridge, vmbus_version),
    /* VM-level caps shared by the disks, e.g. "profile=Standard_F32s_v2". */
    DEFINE_PROP_STRING("vm-perf", HvVmbusBridge, vm_perf),
};

static void hv_vmbus_bridge_init(Object *obj)
{
    HvVmbusBridge *s = HV_VMBUS_BRIDGE(obj);

    s->vmbus_version = g_strdup("5.3");
}

static void hv_vmbus_bridge_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    AcpiDevAmlIfClass *adevc = ACPI_DEV_AML_IF_CLASS(klass);

    dc->realize = hv_vmbus_bridge_realize;
    device_class_set_legacy_reset(dc, hv_vmbus_bridge_reset);
    device_class_set_props(dc, hv_vmbus_bridge_props);
    dc->desc = "Hyper-V partition and VMBus server (hv-storvsc)";
    set_bit(DEVICE_CATEGORY_BRIDGE, dc->categories);
    adevc->build_dev_aml = hv_vmbus_bridge_build_aml;
}

static const TypeInfo hv_vmbus_bridge_info = {
    .name = TYPE_HV_VMBUS_BRIDGE,
    .parent = TYPE_ISA_DEVICE,
    .instance_size = sizeof(HvVmbusBridge),
    .instance_init = hv_vmbus_bridge_init,
    .class_init = hv_vmbus_bridge_class_init,
    .interfaces = (InterfaceInfo[]) {
        { TYPE_ACPI_DEV_AML_IF },
        { },
    },
};

static void hv_vmbus_register_types(void)
{
    type_register_static(&hv_vmbus_bridge_info);
}

type_init(hv_vmbus_register_types)

HvstorVmbus *hv_vmbus_bridge_get(Error **errp)
{
    ISABus *isa;
    ISADevice *dev;

    if (the_bridge) {
        return the_bridge->vb;
    }
    isa = ISA_BUS(object_resolve_path_type("", TYPE_ISA_BUS, NULL));
    if (!isa) {
        error_setg(errp, "no ISA bus for the VMBus bridge (use -machine q35 or pc)");
        return NULL;
    }
    dev = isa_new(TYPE_HV_VMBUS_BRIDGE);
    if (!isa_realize_and_unref(dev, isa, errp)) {
        return NULL;
    }
    return the_bridge->vb;
}
