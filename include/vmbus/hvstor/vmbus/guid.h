// GUIDs in the byte order VMBus carries them (first three fields little-endian).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hvstor::vmbus {

struct Guid {
    std::array<uint8_t, 16> bytes{};

    // "ba6163d9-04a1-4d29-b605-72e2ffb1dc7f"; nullopt if malformed.
    static std::optional<Guid> parse(std::string_view text);
    std::string to_string() const;
    bool operator==(const Guid&) const = default;
};

// Hyper-V synthetic SCSI controller interface.
inline const Guid kScsiControllerType =
    *Guid::parse("ba6163d9-04a1-4d29-b605-72e2ffb1dc7f");
// The same storage protocol as Generation 1's IDE accelerator (one channel per IDE disk)
// and as a synthetic Fibre Channel HBA; Linux's storvsc binds all three.
inline const Guid kIdeAcceleratorType =
    *Guid::parse("32412632-86cb-44a2-9b5c-50d1417354f5");
inline const Guid kSynthFcType =
    *Guid::parse("2f9bcc4a-0069-4af3-b76b-6fd0be528cda");

} // namespace hvstor::vmbus
