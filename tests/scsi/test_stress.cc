// Several threads submitting random 4 KiB reads and writes to one disk at once: every
// command completes exactly once, and every read sees the last write to its blocks.
#include <atomic>
#include <random>
#include <thread>

#include "scsi_test.h"

namespace hvstor::scsi::test {
namespace {

constexpr int kThreads = 4;
constexpr int kPerThread = 2000;
constexpr int kBatch = 16;
constexpr uint32_t kSlotsPerThread = 1024;  // 4 KiB slots each thread owns
constexpr uint64_t kDiskBytes = uint64_t{kThreads} * kSlotsPerThread * 4096;

struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
};

// Counts completions per command and wakes the owning thread.
class CountingSink : public CommandSink {
public:
    explicit CountingSink(size_t n) : times(n) {}
    void command_done(Command* cmd) override {
        const auto idx = reinterpret_cast<uintptr_t>(cmd->opaque);
        times[idx].fetch_add(1);
        total.fetch_add(1);
        Waiter& w = *waiters[idx / kPerThread];
        std::lock_guard lock(w.mu);
        w.done++;
        w.cv.notify_all();
    }
    std::vector<std::atomic<int>> times;
    std::atomic<uint64_t> total{0};
    Waiter* waiters[kThreads] = {};
};

void fill_block(uint8_t* p, uint32_t stamp) {
    for (size_t i = 0; i < 4096; i += 4) std::memcpy(p + i, &stamp, 4), stamp = stamp * 2654435761u + 1;
}

void stress(Backend& be) {
    CountingSink sink(kThreads * kPerThread);
    Disk disk(be, DiskConfig{}, sink);
    std::vector<Waiter> waiters(kThreads);
    for (int t = 0; t < kThreads; t++) sink.waiters[t] = &waiters[t];
    std::atomic<int> mismatches{0}, failures{0};

    auto worker = [&](int t) {
        std::mt19937 rng(1234 + t);
        std::vector<uint32_t> shadow(kSlotsPerThread, 0);  // 0: never written, reads zeros
        AlignedBuf mem(kBatch * 4096);
        std::vector<iovec> iov(kBatch);
        std::vector<Command> cmds(kBatch);
        uint32_t next_stamp = static_cast<uint32_t>(t) << 24 | 1;
        int issued = 0;
        Waiter& w = waiters[t];
        while (issued < kPerThread) {
            const int n = std::min(kBatch, kPerThread - issued);
            std::vector<uint32_t> slots;
            while (static_cast<int>(slots.size()) < n) {
                const uint32_t s = rng() % kSlotsPerThread;
                if (std::find(slots.begin(), slots.end(), s) == slots.end()) slots.push_back(s);
            }
            std::vector<Command*> batch;
            std::vector<bool> is_write(n);
            for (int i = 0; i < n; i++) {
                Command& c = cmds[i];
                c = Command{};
                is_write[i] = rng() % 2;
                const uint32_t lba = (static_cast<uint32_t>(t) * kSlotsPerThread + slots[i]) * 8;
                c.cdb = {};
                c.cdb[0] = is_write[i] ? 0x2A : 0x28;
                c.cdb[2] = static_cast<uint8_t>(lba >> 24);
                c.cdb[3] = static_cast<uint8_t>(lba >> 16);
                c.cdb[4] = static_cast<uint8_t>(lba >> 8);
                c.cdb[5] = static_cast<uint8_t>(lba);
                c.cdb[8] = 8;
                c.cdb_len = 10;
                c.dir = is_write[i] ? Dir::ToDevice : Dir::FromDevice;
                iov[i] = {mem.p + i * 4096, 4096};
                c.iov = &iov[i];
                c.iovcnt = 1;
                c.xfer_len = 4096;
                c.opaque = reinterpret_cast<void*>(static_cast<uintptr_t>(t * kPerThread + issued + i));
                if (is_write[i]) {
                    shadow[slots[i]] = next_stamp;
                    fill_block(mem.p + i * 4096, next_stamp++);
                } else {
                    std::memset(mem.p + i * 4096, 0xEE, 4096);
                }
                batch.push_back(&c);
            }
            {
                std::lock_guard lock(w.mu);
                w.done = 0;
            }
            disk.submit(batch);
            {
                std::unique_lock lock(w.mu);
                w.cv.wait(lock, [&] { return w.done >= n; });
            }
            for (int i = 0; i < n; i++) {
                if (cmds[i].status != kStatusGood || cmds[i].data_transferred != 4096) failures.fetch_add(1);
                if (is_write[i]) continue;
                std::vector<uint8_t> want(4096, 0);
                if (shadow[slots[i]] != 0) fill_block(want.data(), shadow[slots[i]]);
                if (std::memcmp(want.data(), mem.p + i * 4096, 4096) != 0) mismatches.fetch_add(1);
            }
            issued += n;
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) threads.emplace_back(worker, t);
    for (auto& th : threads) th.join();
    be.drain();

    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(mismatches.load(), 0);
    EXPECT_EQ(sink.total.load(), uint64_t{kThreads} * kPerThread);
    for (size_t i = 0; i < sink.times.size(); i++) ASSERT_EQ(sink.times[i].load(), 1) << i;
    const auto& s = disk.stats();
    EXPECT_EQ(s.reads.load() + s.writes.load(), uint64_t{kThreads} * kPerThread);
    EXPECT_EQ(s.bytes_read.load() + s.bytes_written.load(), uint64_t{kThreads} * kPerThread * 4096);
    EXPECT_EQ(s.errors.load(), 0u);
}

TEST(Stress, Ram) {
    std::string err;
    auto be = backend::make_ram(kDiskBytes, err);
    ASSERT_TRUE(be) << err;
    stress(*be);
}

TEST(Stress, FileDirect) {
    TempFile f(kDiskBytes);
    std::string err;
    auto be = backend::open_file(f.path, backend::FileOptions{}, err);
    ASSERT_TRUE(be) << err;
    stress(*be);
}

TEST(Stress, FileBuffered) {
    TempFile f(kDiskBytes);
    std::string err;
    auto be = backend::open_file(f.path, backend::FileOptions{.read_only = false, .direct = false}, err);
    ASSERT_TRUE(be) << err;
    stress(*be);
}

} // namespace
} // namespace hvstor::scsi::test
