/*
 * hv-vmbus-bridge: QEMU glue for the hv-storvsc Hyper-V partition and VMBus
 * server (C++, built as libhvstor.a). The QOM device: properties, realize and
 * reset, the VM run-state handler, ACPI, the hypercall port, the CPUID and MSR
 * hooks under TCG. Guest memory is in hvstor-host.c, interrupts in hvstor-irq.c,
 * KVM in hvstor-kvm.c.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/main-loop.h"
#include "qemu/error-report.h"
#include "qemu/module.h"
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "exec/memory.h"
#include "hw/boards.h"
#include "hw/isa/isa.h"
#include "hw/qdev-properties.h"
#include "hw/acpi/acpi_aml_interface.h"
#include "hw/acpi/aml-build.h"
#include "block/aio.h"
#include "migration/vmstate.h"
#include "system/hw_accel.h"
#include "system/kvm.h"
#include "system/runstate.h"
#include "system/tcg.h"
#include "cpu.h"
#include "hw/i386/hvstor-hooks.h"
#include "hvstor-vmbus.h"
#include "hvstor-internal.h"
#include "hvstor/capi.h"

OBJECT_DECLARE_SIMPLE_TYPE(HvVmbusBridge, HV_VMBUS_BRIDGE)
OBJECT_DECLARE_SIMPLE_TYPE(HvVmbusBus, HV_VMBUS_BUS)

/* The bus the bridge's VMBus devices (hv-storvsc) plug into. */
struct HvVmbusBus {
    BusState parent_obj;
    unsigned next_index; /* of the next device: its default instance GUID */
};

struct HvVmbusBridge {
    ISADevice parent_obj;
    HvVmbusBus bus;
    /*
     * The machine-wide CPUID and MSR hooks of QEMU's patched i386 target point here: the
     * hooks find the bridge from them (one partition per machine, so one bridge).
     */
    HvstorCpuHooks cpu_hooks;
    uint32_t hypercall_port;
    char *vmbus_version;
    char *vm_perf;
    MemoryRegion io;
    HvstorVmbus *vb;
    HvIrq irq;
    VMChangeStateEntry *run_state;
    /* The model's saved state while a save or load is under way (hvstor_vmbus_save). */
    uint8_t *state;
    uint32_t state_len;
};

/* The partition whose hooks QEMU calls: hvstor_cpu_hooks is set only while a bridge is. */
static HvstorVmbus *hooked_vmbus(void)
{
    return container_of(hvstor_cpu_hooks, HvVmbusBridge, cpu_hooks)->vb;
}

static void hook_cpuid(CPUX86State *env, uint32_t index, uint32_t count,
                       uint32_t *eax, uint32_t *ebx, uint32_t *ecx, uint32_t *edx)
{
    hvstor_cpuid(hooked_vmbus(), index, count, eax, ebx, ecx, edx);
}

static int hook_rdmsr(CPUX86State *env, uint32_t msr, uint64_t *val)
{
    return hvstor_rdmsr(hooked_vmbus(), env_cpu(env)->cpu_index, msr, val);
}

static int hook_wrmsr(CPUX86State *env, uint32_t msr, uint64_t val)
{
    return hvstor_wrmsr(hooked_vmbus(), env_cpu(env)->cpu_index, msr, val);
}

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

/* The properties and the machine, checked before anything is built. */
static bool hv_vmbus_bridge_check(HvVmbusBridge *s, MachineState *ms,
                                  uint32_t *version, Error **errp)
{
    if (hvstor_cpu_hooks) {
        error_setg(errp, "only one hv-vmbus-bridge per machine (its Hyper-V CPUID leaves "
                   "and MSRs are the machine's)");
        return false;
    }
    if (!tcg_enabled() && !kvm_enabled()) {
        error_setg(errp, "hv-vmbus-bridge: needs TCG or KVM");
        return false;
    }
    if (!hvstor_parse_vmbus_version(s->vmbus_version, version)) {
        char *known = hvstor_vmbus_versions();

        error_setg(errp, "hv-vmbus-bridge: vmbus-version '%s' is not one of %s",
                   s->vmbus_version ? s->vmbus_version : "", known ? known : "(out of memory)");
        free(known);
        return false;
    }
    if (s->hypercall_port == 0 || s->hypercall_port > 0xFFFC) {
        error_setg(errp, "hv-vmbus-bridge: hypercall-port must be 1..0xfffc");
        return false;
    }
    if (ms->smp.max_cpus > 255) {
        error_setg(errp, "hv-vmbus-bridge: at most 255 vCPUs (xAPIC delivery)");
        return false;
    }
    return true;
}

/*
 * A machine reset waits on the main thread for the channels' closes, which may wait for
 * drive= requests that a drained section parked until the main loop ends it.
 */
static void hv_vmbus_poll_main_loop(void *opaque)
{
    if (qemu_get_current_aio_context() == qemu_get_aio_context()) {
        aio_poll(qemu_get_aio_context(), false);
    }
}

/* The partition and VMBus server over guest memory and the interrupt path. */
static bool hv_vmbus_bridge_create(HvVmbusBridge *s, uint32_t nr_vps, uint32_t version,
                                   Error **errp)
{
    HvstorHostOps ops = {
        .opaque = &s->irq,
        .raise_vector = hv_irq_raise,
        .poll_while_waiting = hv_vmbus_poll_main_loop,
    };
    const char *vm_perf;
    char *err = NULL;

    hv_host_memory_ops(&ops);
    hv_host_log_ops(&ops);
    hv_irq_init(&s->irq, nr_vps);
    s->vb = hvstor_vmbus_new(&ops, nr_vps, s->hypercall_port, version, &err);
    if (!s->vb) {
        hv_model_error(errp, err, "hv-vmbus-bridge");
        hv_irq_cleanup(&s->irq);
        return false;
    }
    vm_perf = hv_settings_resolve(TYPE_HV_VM_CAPS, "vm-perf", s->vm_perf, NULL, errp);
    if (s->vm_perf && (!vm_perf || (*vm_perf && !hvstor_vmbus_set_vm_perf(s->vb, vm_perf, &err)))) {
        if (vm_perf) {
            hv_model_error(errp, err, "hv-vmbus-bridge: vm-perf");
        }
        hvstor_vmbus_free(s->vb);
        s->vb = NULL;
        hv_irq_cleanup(&s->irq);
        return false;
    }
    return true;
}

/*
 * Stopped means stopped: from the moment the VM stops (QMP stop, a gdbstub halt,
 * dump-guest-memory, an I/O error stop) until it runs again, no channel reads a ring,
 * writes guest memory or raises an interrupt, and SynIC messages and event flags wait.
 * QEMU has paused the vCPUs before it calls this; the pause waits for ring rounds and
 * deliveries already in progress on device threads, which never wait for the main loop,
 * then for the disks' storage I/O in flight (QEMU drains drive= disks itself, after this).
 * Completions, and disk requests released meanwhile, go out on resume, before the vCPUs run.
 */
static void hv_vmbus_bridge_run_state(void *opaque, bool running, RunState state)
{
    HvVmbusBridge *s = opaque;

    if (running) {
        hvstor_vmbus_set_running(s->vb, true);
        hv_irq_set_running(&s->irq, true);
    } else {
        /* The model first: its threads may raise vectors until it holds still. */
        hvstor_vmbus_set_running(s->vb, false);
        hv_irq_set_running(&s->irq, false);
    }
}

static void hv_vmbus_bridge_realize(DeviceState *dev, Error **errp)
{
    HvVmbusBridge *s = HV_VMBUS_BRIDGE(dev);
    MachineState *ms = MACHINE(qdev_get_machine());
    uint32_t version;

    if (!hv_vmbus_bridge_check(s, ms, &version, errp) ||
        !hv_vmbus_bridge_create(s, ms->smp.max_cpus, version, errp)) {
        return;
    }
    /*
     * Realized before the machine first runs (prelaunch, -S): paused until QEMU starts
     * it. The bridge is never unplugged, so the handler stays for the process's life.
     */
    if (!runstate_is_running()) {
        hv_vmbus_bridge_run_state(s, false, runstate_get());
    }
    s->run_state = qemu_add_vm_change_state_handler(hv_vmbus_bridge_run_state, s);
    memory_region_init_io(&s->io, OBJECT(dev), &hypercall_port_ops, s,
                          "hv-hypercall", 4);
    isa_register_ioport(ISA_DEVICE(dev), &s->io, s->hypercall_port);
    s->cpu_hooks = (HvstorCpuHooks) {
        .cpuid = hook_cpuid,
        .rdmsr = hook_rdmsr,
        .wrmsr = hook_wrmsr,
    };
    hvstor_cpu_hooks = &s->cpu_hooks;
#ifdef CONFIG_KVM
    if (kvm_enabled() && !hv_kvm_init(s->vb, errp)) {
        qemu_del_vm_change_state_handler(s->run_state);
        s->run_state = NULL;
        hvstor_cpu_hooks = NULL;
        return;
    }
#endif
    /* "vmbus": where -device hv-storvsc plugs in (bus=vmbus, or found by its type). */
    qbus_init(&s->bus, sizeof(s->bus), TYPE_HV_VMBUS_BUS, dev, "vmbus");
    /* A fixed QOM path for QMP, whatever the bridge's id: /machine/hv-vmbus. */
    object_property_add_const_link(qdev_get_machine(), "hv-vmbus", OBJECT(dev));
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

static const HvPropDoc hv_vmbus_bridge_docs[] = {
    { "hypercall-port", "I/O port the hypercall page's OUT traps through (0xb48 = 2888)" },
    { "vmbus-version", "newest VMBus protocol version offered to the guest: 5.3, 5.2, 5.1, "
                       "5.0, 4.1, 4.0, 3.0, 2.4 (default 5.3)" },
    { "vm-perf", "VM-level caps the modelled disks share: the id of an -object hv-vm-caps, "
                 "or its settings as text, e.g. profile=Standard_F32s_v2 (docs/perf-model.md)" },
    { "stats", "statistics of the partition and the VMBus server, a JSON object (read-only)" },
    { NULL }
};

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

/* Live statistics for QMP, a JSON object: qom-get path=/machine/hv-vmbus property=stats */
static void hv_vmbus_bridge_get_stats(Object *obj, Visitor *v, const char *name, void *opaque,
                                      Error **errp)
{
    HvVmbusBridge *s = HV_VMBUS_BRIDGE(obj);

    hv_visit_stats(v, name, s->vb ? hvstor_vmbus_stats_json(s->vb) : NULL, "hv-vmbus-bridge",
                   errp);
}

/*
 * Savevm and migration: the model writes its state (partition, VMBus server, every
 * controller on the bridge, versioned in the stream itself) as one buffer. Devices save
 * after RAM, so a load finds guest memory in place, and the VM is stopped on both sides:
 * the model holds still (see hv_vmbus_bridge_run_state) and starts the loaded channels
 * when the VM runs. QEMU resets the machine before loadvm and at an incoming migration's
 * start, which the load requires.
 */
#define HV_VMBUS_STATE_MAX (64u << 20) /* far above any machine's state: a sanity bound */

static void hv_vmbus_bridge_drop_state(HvVmbusBridge *s)
{
    g_free(s->state);
    s->state = NULL;
    s->state_len = 0;
}

static int hv_vmbus_bridge_pre_save(void *opaque)
{
    HvVmbusBridge *s = opaque;
    uint8_t *data = NULL;
    size_t len = 0;
    char *err = NULL;

    hv_vmbus_bridge_drop_state(s);
    if (!hvstor_vmbus_save(s->vb, &data, &len, &err) || len > HV_VMBUS_STATE_MAX) {
        error_report("hv-vmbus-bridge: cannot save its state: %s",
                     err ? err : data ? "larger than 64 MiB" : "out of memory");
        free(err);
        free(data);
        return -EINVAL;
    }
    s->state = data; /* malloc'd: g_free frees it (GLib allocates with malloc) */
    s->state_len = len;
    return 0;
}

static int hv_vmbus_bridge_post_save(void *opaque)
{
    hv_vmbus_bridge_drop_state(opaque);
    return 0;
}

static int hv_vmbus_bridge_pre_load(void *opaque)
{
    hv_vmbus_bridge_drop_state(opaque);
    return 0;
}

static int hv_vmbus_bridge_post_load(void *opaque, int version_id)
{
    HvVmbusBridge *s = opaque;
    char *err = NULL;
    bool ok = hvstor_vmbus_load(s->vb, s->state, s->state_len, &err);

    hv_irq_drop_pending(&s->irq);
    hv_vmbus_bridge_drop_state(s);
    if (!ok) {
        error_report("hv-vmbus-bridge: cannot load its state: %s", err ? err : "out of memory");
        free(err);
        return -EINVAL;
    }
    return 0;
}

static bool hv_vmbus_bridge_state_len_ok(void *opaque, int version_id)
{
    HvVmbusBridge *s = opaque;

    if (s->state_len > HV_VMBUS_STATE_MAX) {
        error_report("hv-vmbus-bridge: saved state of %u bytes (at most %u)", s->state_len,
                     HV_VMBUS_STATE_MAX);
        return false;
    }
    return true;
}

static const VMStateDescription hv_vmbus_bridge_vmstate = {
    .name = "hv-vmbus-bridge",
    .version_id = 1,
    .minimum_version_id = 1,
    .pre_save = hv_vmbus_bridge_pre_save,
    .post_save = hv_vmbus_bridge_post_save,
    .pre_load = hv_vmbus_bridge_pre_load,
    .post_load = hv_vmbus_bridge_post_load,
    .fields = (const VMStateField[]) {
        VMSTATE_UINT32(state_len, HvVmbusBridge),
        VMSTATE_VALIDATE("hv-vmbus-bridge state size", hv_vmbus_bridge_state_len_ok),
        VMSTATE_VBUFFER_ALLOC_UINT32(state, HvVmbusBridge, 1, NULL, state_len),
        VMSTATE_END_OF_LIST()
    },
};

static void hv_vmbus_bridge_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    AcpiDevAmlIfClass *adevc = ACPI_DEV_AML_IF_CLASS(klass);

    dc->realize = hv_vmbus_bridge_realize;
    device_class_set_legacy_reset(dc, hv_vmbus_bridge_reset);
    device_class_set_props(dc, hv_vmbus_bridge_props);
    dc->desc = "Hyper-V partition and VMBus server (hv-storvsc)";
    dc->vmsd = &hv_vmbus_bridge_vmstate;
    set_bit(DEVICE_CATEGORY_BRIDGE, dc->categories);
    adevc->build_dev_aml = hv_vmbus_bridge_build_aml;
    object_class_property_add(klass, "stats", "any", hv_vmbus_bridge_get_stats, NULL, NULL, NULL);
    hv_describe_props(klass, hv_vmbus_bridge_docs);
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

static const TypeInfo hv_vmbus_bus_info = {
    .name = TYPE_HV_VMBUS_BUS,
    .parent = TYPE_BUS,
    .instance_size = sizeof(HvVmbusBus),
};

static void hv_vmbus_register_types(void)
{
    hv_host_thread_hooks(); /* only stores two pointers: nothing runs yet */
    type_register_static(&hv_vmbus_bridge_info);
    type_register_static(&hv_vmbus_bus_info);
}

type_init(hv_vmbus_register_types)

HvstorVmbus *hv_vmbus_bus_vmbus(BusState *bus, unsigned *index)
{
    HvVmbusBus *b = HV_VMBUS_BUS(bus);

    *index = b->next_index++;
    return HV_VMBUS_BRIDGE(bus->parent)->vb;
}
