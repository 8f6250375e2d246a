// What the libFuzzer targets share: a reader that decodes the input front to back (so that
// tests/fuzz/gen_corpus.py can write inputs that mean something), and a check that ends the
// run with a message. The guest RAM the device targets use: fuzz_host.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <thread>

namespace hvstor::fuzz {

// A finding: print why and abort, so libFuzzer saves the input.
[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "fuzz check failed: %s\n", what);
    std::fflush(stderr);
    std::abort();
}
#define FUZZ_CHECK(cond)                                                                            \
    do {                                                                                            \
        if (!(cond)) ::hvstor::fuzz::fail(#cond " (" __FILE__ ":" FUZZ_STR(__LINE__) ")");          \
    } while (0)
#define FUZZ_STR2(x) #x
#define FUZZ_STR(x) FUZZ_STR2(x)

// Little-endian fields from the front of the input; zeros once it runs out.
class Reader {
public:
    Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
    Reader(std::span<const uint8_t> s) : p_(s.data()), left_(s.size()) {}

    size_t left() const { return left_; }
    bool empty() const { return left_ == 0; }

    uint8_t u8() {
        if (!left_) return 0;
        left_--;
        return *p_++;
    }
    uint16_t u16() { return uint16_t(u8() | u8() << 8); }
    uint32_t u32() { return uint32_t(u16()) | uint32_t(u16()) << 16; }
    uint64_t u64() { return uint64_t(u32()) | uint64_t(u32()) << 32; }
    // Up to n bytes (fewer when the input ends).
    std::span<const uint8_t> bytes(size_t n) {
        n = n < left_ ? n : left_;
        std::span<const uint8_t> s(p_, n);
        p_ += n;
        left_ -= n;
        return s;
    }
    // Copies up to sizeof(T) bytes over a zeroed T.
    template <typename T> T fill() {
        T v{};
        auto b = bytes(sizeof v);
        std::memcpy(&v, b.data(), b.size());
        return v;
    }

private:
    const uint8_t* p_;
    size_t left_;
};

// One record: a type byte, a u16 length, that many bytes (fewer at the end of the input).
struct Record {
    uint8_t type;
    std::span<const uint8_t> body;
};
inline bool next_record(Reader& in, Record& r) {
    if (in.empty()) return false;
    r.type = in.u8();
    const uint16_t len = in.u16();
    r.body = in.bytes(len);
    return true;
}

// A small deterministic generator for the flip threads (seeded from the input).
struct Rng {
    uint64_t s;
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
};

// A thread that flips bits in shared guest memory while the host reads it, as a racing guest
// would, until it is destroyed. pick(r) maps a random word to the byte to flip; bits 40-42 of
// r choose the bit (pick uses the others) and about one step in 64 yields the CPU.
class Flipper {
public:
    using Pick = std::function<uint8_t*(uint64_t r)>;
    Flipper(Pick pick, uint64_t seed) : pick_(std::move(pick)), rng_{seed | 1} {
        t_ = std::thread([this] { run(); });
    }
    ~Flipper() {
        stop_ = true;
        t_.join();
    }

private:
    void run() {
        while (!stop_) {
            const uint64_t r = rng_.next();
            std::atomic_ref<uint8_t>(*pick_(r)).fetch_xor(uint8_t(1u << ((r >> 40) % 8)),
                                                          std::memory_order_relaxed);
            if ((r >> 50) % 64 == 0) std::this_thread::yield();
        }
    }
    Pick pick_;
    Rng rng_;
    std::atomic<bool> stop_{false};
    std::thread t_;
};

} // namespace hvstor::fuzz
