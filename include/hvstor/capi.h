/*
 * The C boundary between the C++ device model and the QEMU glue.
 * No C++ exception crosses it; every function is safe to call with the
 * object it takes, from any thread.
 */
#ifndef HVSTOR_CAPI_H
#define HVSTOR_CAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct HvstorHostOps {
    void *opaque;
    bool (*read_gpa)(void *opaque, uint64_t gpa, void *dst, size_t len);
    bool (*write_gpa)(void *opaque, uint64_t gpa, const void *src, size_t len);
    bool (*atomic_or_u32)(void *opaque, uint64_t gpa, uint32_t mask);
    void (*raise_vector)(void *opaque, uint32_t vp, uint8_t vector);
} HvstorHostOps;

typedef enum HvstorMsrResult {
    HVSTOR_MSR_HANDLED = 0,
    HVSTOR_MSR_FAULT = 1,    /* inject #GP */
    HVSTOR_MSR_NOT_OURS = 2, /* let the CPU model handle it */
} HvstorMsrResult;

typedef struct HvstorStats {
    uint64_t hypercalls;
    uint64_t hypercall_errors;
    uint64_t msr_faults;
    uint64_t messages_in;
    uint64_t messages_out;
    uint64_t bad_messages;
    uint64_t synic_deferred;
    uint32_t vmbus_version; /* 0 until the guest connected */
} HvstorStats;

/* A partition with its SynIC and VMBus server. */
typedef struct HvstorVmbus HvstorVmbus;

/* Parses "5.3" style VMBus versions; false for versions this server does not speak. */
bool hvstor_parse_vmbus_version(const char *text, uint32_t *version);

/* NULL on failure, with a message in *err (free() it). */
HvstorVmbus *hvstor_vmbus_new(const HvstorHostOps *ops, uint32_t nr_vps,
                              uint16_t hypercall_port, uint32_t max_version,
                              char **err);
void hvstor_vmbus_free(HvstorVmbus *vb);
void hvstor_vmbus_reset(HvstorVmbus *vb);

void hvstor_cpuid(HvstorVmbus *vb, uint32_t leaf, uint32_t subleaf,
                  uint32_t *eax, uint32_t *ebx, uint32_t *ecx, uint32_t *edx);
HvstorMsrResult hvstor_rdmsr(HvstorVmbus *vb, uint32_t vp, uint32_t msr, uint64_t *val);
HvstorMsrResult hvstor_wrmsr(HvstorVmbus *vb, uint32_t vp, uint32_t msr, uint64_t val);
/* Returns the value for RAX. */
uint64_t hvstor_hypercall(HvstorVmbus *vb, uint32_t vp, uint64_t control,
                          uint64_t input, uint64_t output);

/*
 * Offers a synthetic SCSI controller's primary channel with the given instance GUID
 * (16 bytes, wire order). Returns its child relid, 0 on failure.
 */
uint32_t hvstor_vmbus_add_scsi_controller(HvstorVmbus *vb, const uint8_t instance[16]);

void hvstor_vmbus_stats(HvstorVmbus *vb, HvstorStats *out);

#ifdef __cplusplus
}
#endif

#endif
