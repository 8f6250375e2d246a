// Storage the QEMU glue provides through HvstorBlockOps (hv-disk's drive=: QEMU's block
// layer), as a backend::Backend. Checks each request the way every backend does, hands the
// well-formed ones to the glue and counts them until hvstor_block_complete.
#pragma once

#include <memory>

#include "hvstor/backend/backend.h"
#include "hvstor/capi.h"

namespace hvstor::capi {

// Throws DiskError when `ops` is incomplete or its size is not a non-zero multiple of 512.
std::unique_ptr<backend::Backend> make_drive_backend(const HvstorBlockOps& ops);

} // namespace hvstor::capi
