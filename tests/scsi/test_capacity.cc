// Changing a disk's capacity while it runs (Disk::resize): one UNIT ATTENTION, CAPACITY DATA
// HAS CHANGED for the next command, READ CAPACITY and range checks against the new size, and
// exactly one unit attention however many threads submit at once.
#include <atomic>
#include <thread>

#include "scsi_test.h"

namespace hvstor::scsi::test {
namespace {

constexpr uint8_t kRead10 = 0x28, kWrite10 = 0x2A;
constexpr uint64_t kMiB = 1 << 20;

std::unique_ptr<Backend> ram(uint64_t bytes) {
    std::string err;
    auto be = backend::make_ram(bytes, err);
    EXPECT_TRUE(be) << err;
    return be;
}

std::unique_ptr<Backend> null_disk(uint64_t bytes) {
    std::string err;
    return backend::make_null(bytes, err);
}

std::vector<uint8_t> tur() { return {0x00, 0, 0, 0, 0, 0}; }
std::vector<uint8_t> read_capacity10() { return {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}; }
std::vector<uint8_t> read_capacity16() {
    std::vector<uint8_t> c(16);
    c[0] = 0x9E;
    c[1] = 0x10;
    put_be(c, 10, 32, 4);
    return c;
}

bool is_capacity_change(const Io& io) {
    return io.status() == kStatusCheckCondition && io.key() == kSenseUnitAttention && io.asc() == 0x2A &&
           io.ascq() == 0x09;
}

struct CapacityTest : ::testing::Test {
    std::unique_ptr<Backend> be = ram(4 * kMiB);
    DiskRig rig{*be};

    void resize(uint64_t bytes) {
        std::string err;
        ASSERT_TRUE(rig.disk.resize(bytes, err)) << err;
    }
    uint64_t last_lba10() {
        Io io(read_capacity10(), Dir::FromDevice, 8);
        rig.run(io);
        EXPECT_EQ(io.status(), kStatusGood);
        return get_be(&io.buf[0], 4);
    }
    uint64_t last_lba16() {
        Io io(read_capacity16(), Dir::FromDevice, 32);
        rig.run(io);
        EXPECT_EQ(io.status(), kStatusGood);
        return get_be(&io.buf[0], 8);
    }
    uint8_t status_of(const std::vector<uint8_t>& cdb, Dir dir = Dir::None, size_t len = 0) {
        Io io(cdb, dir, len);
        rig.run(io);
        return io.status();
    }
};

TEST_F(CapacityTest, TheNextCommandGetsOneUnitAttentionThenTheNewSize) {
    resize(2 * kMiB);  // shrink first: the RAM disk grows no further than it was made
    Io first(tur());
    rig.run(first);
    EXPECT_TRUE(is_capacity_change(first)) << int(first.status()) << " " << int(first.key());
    EXPECT_EQ(first.cmd.sense_len, 18);
    EXPECT_EQ(first.cmd.sense[0], 0x70) << "fixed format, current";
    EXPECT_EQ(status_of(tur()), kStatusGood) << "reported once";
    EXPECT_EQ(last_lba10(), 2 * kMiB / 512 - 1);
    EXPECT_EQ(last_lba16(), 2 * kMiB / 512 - 1);
    resize(3 * kMiB);
    Io rc(read_capacity16(), Dir::FromDevice, 32);
    rig.run(rc);
    EXPECT_TRUE(is_capacity_change(rc)) << "READ CAPACITY takes the unit attention too";
    EXPECT_EQ(rc.cmd.data_transferred, 0u);
    EXPECT_EQ(last_lba16(), 3 * kMiB / 512 - 1);
    EXPECT_EQ(rig.disk.blocks(), 3 * kMiB / 512);
    EXPECT_EQ(rig.disk.stats().errors.load(), 2u);
    EXPECT_EQ(rig.disk.stats().unit_attentions.load(), 2u);
}

TEST_F(CapacityTest, InquiryPassesItByAndRequestSenseReturnsIt) {
    resize(kMiB);
    EXPECT_EQ(status_of(inquiry(false, 0, 96), Dir::FromDevice, 96), kStatusGood);
    EXPECT_EQ(status_of(inquiry(true, 0x00, 96), Dir::FromDevice, 96), kStatusGood);
    Io sense({0x03, 0, 0, 0, 252, 0}, Dir::FromDevice, 252);
    rig.run(sense);
    ASSERT_EQ(sense.status(), kStatusGood) << "REQUEST SENSE reports it as data";
    EXPECT_EQ(sense.cmd.data_transferred, 18u);
    EXPECT_EQ(sense.buf[2], kSenseUnitAttention);
    EXPECT_EQ(sense.buf[12], 0x2A);
    EXPECT_EQ(sense.buf[13], 0x09);
    EXPECT_EQ(status_of(tur()), kStatusGood) << "and that cleared it";
    Io again({0x03, 0, 0, 0, 252, 0}, Dir::FromDevice, 252);
    rig.run(again);
    EXPECT_EQ(again.buf[2], kSenseNoSense);
}

TEST_F(CapacityTest, NoChangeNoUnitAttentionAndChangesBeforeACommandMakeOne) {
    resize(4 * kMiB);
    EXPECT_EQ(status_of(tur()), kStatusGood) << "the same size is no change";
    resize(2 * kMiB);
    resize(kMiB);
    Io io(cdb10(kRead10, 0, 8), Dir::FromDevice, 4096);
    rig.run(io);
    EXPECT_TRUE(is_capacity_change(io));
    EXPECT_EQ(status_of(cdb10(kRead10, 0, 8), Dir::FromDevice, 4096), kStatusGood);
    EXPECT_EQ(last_lba10(), kMiB / 512 - 1);
}

TEST_F(CapacityTest, ShrinkBoundsIoAndKeepsTheRestGrowExposesZeros) {
    Io w0(cdb10(kWrite10, 0, 8), Dir::ToDevice, 4096);
    std::fill(w0.buf.begin(), w0.buf.end(), 0x5A);
    rig.run(w0);
    Io w1(cdb10(kWrite10, 4000, 8), Dir::ToDevice, 4096);
    std::fill(w1.buf.begin(), w1.buf.end(), 0xC3);
    rig.run(w1);
    ASSERT_EQ(w1.status(), kStatusGood);
    resize(kMiB);  // 2048 blocks
    EXPECT_EQ(status_of(tur()), kStatusCheckCondition);
    Io beyond(cdb10(kRead10, 4000, 8), Dir::FromDevice, 4096);
    rig.run(beyond);
    EXPECT_EQ(beyond.key(), kSenseIllegalRequest);
    EXPECT_EQ(beyond.asc(), 0x21) << "LBA out of range";
    Io across(cdb10(kWrite10, 2046, 4), Dir::ToDevice, 2048);
    rig.run(across);
    EXPECT_EQ(across.asc(), 0x21);
    EXPECT_EQ(status_of(cdb10(kRead10, 2044, 4), Dir::FromDevice, 2048), kStatusGood) << "up to the new end";
    Io r0(cdb10(kRead10, 0, 8), Dir::FromDevice, 4096);
    rig.run(r0);
    EXPECT_EQ(r0.buf, std::vector<uint8_t>(4096, 0x5A)) << "the surviving range keeps its data";
    resize(4 * kMiB);
    EXPECT_EQ(status_of(tur()), kStatusCheckCondition);
    Io r1(cdb10(kRead10, 4000, 8), Dir::FromDevice, 4096);
    std::fill(r1.buf.begin(), r1.buf.end(), 0xFF);
    rig.run(r1);
    ASSERT_EQ(r1.status(), kStatusGood);
    EXPECT_EQ(r1.buf, std::vector<uint8_t>(4096, 0)) << "bytes a grow exposes read as zeros";
}

TEST(CapacityRefused, NothingChangesAndNoUnitAttention) {
    auto be = ram(kMiB);
    DiskRig rig{*be};
    std::string err;
    EXPECT_FALSE(rig.disk.resize(2 * kMiB, err));
    EXPECT_EQ(err, "ram backend: cannot grow to 2097152 bytes: its memory was mapped once, for the 1048576 bytes "
                   "it was made with");
    EXPECT_FALSE(rig.disk.resize(0, err));
    EXPECT_EQ(err, "ram backend: size 0 is not a positive multiple of 512");
    EXPECT_FALSE(rig.disk.resize(kMiB + 100, err));
    EXPECT_EQ(err, "ram backend: size 1048676 is not a positive multiple of 512");
    FakeBackend fixed(kMiB);
    DiskRig frig{fixed};
    EXPECT_FALSE(frig.disk.resize(2 * kMiB, err));
    EXPECT_EQ(err, "fake: the size cannot change (asked for 2097152 bytes)");
    for (DiskRig* r : {&rig, &frig}) {
        Io io(tur());
        r->run(io);
        EXPECT_EQ(io.status(), kStatusGood);
        EXPECT_EQ(r->disk.blocks(), kMiB / 512);
    }
}

TEST(CapacityNull, AnySize) {
    auto be = null_disk(kMiB);
    DiskRig rig{*be};
    std::string err;
    ASSERT_TRUE(rig.disk.resize(64ull << 40, err)) << err;
    EXPECT_EQ(be->size(), 64ull << 40);
    EXPECT_EQ(rig.disk.blocks(), (64ull << 40) / 512);
    EXPECT_FALSE(rig.disk.resize(513, err));
    EXPECT_EQ(err, "null backend: size 513 is not a positive multiple of 512");
}

// Counts unit attentions and anything else that is not GOOD, from any thread.
class CountingSink : public CommandSink {
public:
    void command_done(Command* c) override {
        const bool ua = c->status == kStatusCheckCondition && (c->sense[2] & 0x0F) == kSenseUnitAttention &&
                        c->sense[12] == 0x2A && c->sense[13] == 0x09;
        if (ua)
            unit_attentions.fetch_add(1);
        else if (c->status != kStatusGood)
            other_errors.fetch_add(1);
        done.fetch_add(1);
    }
    std::atomic<uint64_t> unit_attentions{0}, other_errors{0}, done{0};
};

// Several threads submit reads and TEST UNIT READY at once, as channel workers do, while
// the capacity changes: each change is reported to exactly one command, the rest run.
TEST(CapacityRace, ExactlyOneUnitAttentionPerChange) {
    auto be = null_disk(kMiB);
    CountingSink sink;
    Disk disk(*be, DiskConfig{}, sink);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> submitted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&, t] {
            Io read(cdb10(kRead10, 8, 8), Dir::FromDevice, 4096);
            Io unit(tur());
            Command* batch[2] = {&read.cmd, &unit.cmd};
            while (!stop.load()) {  // the null backend completes inline: reuse is safe
                disk.submit(std::span<Command* const>(batch, t % 2 ? 2 : 1));
                submitted.fetch_add(t % 2 ? 2 : 1);
            }
        });
    }
    constexpr uint64_t kChanges = 200;
    for (uint64_t i = 1; i <= kChanges; i++) {
        std::string err;
        if (!disk.resize((i % 2 ? 2 : 1) * kMiB, err)) { // no unit attention would come
            stop = true;
            for (auto& t : threads) t.join();
            FAIL() << "resize " << i << " refused: " << err;
        }
        while (sink.unit_attentions.load() < i) std::this_thread::yield();
    }
    // More commands after the last one was reported: none may get another.
    const uint64_t mark = submitted.load();
    while (submitted.load() < mark + 1000) std::this_thread::yield();
    stop = true;
    for (auto& t : threads) t.join();
    EXPECT_EQ(sink.unit_attentions.load(), kChanges);
    EXPECT_EQ(sink.other_errors.load(), 0u);
    EXPECT_EQ(sink.done.load(), submitted.load());
    EXPECT_EQ(disk.stats().unit_attentions.load(), kChanges);
}

} // namespace
} // namespace hvstor::scsi::test
