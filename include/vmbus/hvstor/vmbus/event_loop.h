// An event loop of the host's that runs channels instead of a thread of their own (QEMU: an
// IOThread's AioContext, named by hv-storvsc's iothread=). A channel watches its eventfd
// there; each time it is readable the loop's thread runs the channel's rounds until it has
// nothing left to do, or until it has had its share and lets the loop's other work run.
#pragma once

namespace hvstor::vmbus {

class EventLoop {
public:
    virtual ~EventLoop() = default;
    // From now on, calls ready(arg) on the loop's thread whenever `fd` is readable (it
    // stays readable until read). A handle for unwatch, or nullptr if the loop cannot take
    // it. Any thread. Must not wait for the loop's thread: a channel opens under the bus's
    // lock, which a turn of another channel on that thread may be waiting for (offering
    // subchannels).
    virtual void* watch(int fd, void (*ready)(void* arg), void* arg) = 0;
    // When it returns, the watch's `ready` is not running and will not run again. Any
    // thread, the loop's own included, but never from within that `ready`; never with the
    // bus's lock held (it may wait for the loop's thread).
    virtual void unwatch(void* handle) = 0;
};

} // namespace hvstor::vmbus
