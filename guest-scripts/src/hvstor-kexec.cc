// hvstor-kexec: the guest's kexec, for the kexec and kdump boot tests (busybox has none, and
// Debian's kexec-tools links Xen's libraries). Built static by scripts/guest-assets.sh.
//
//   hvstor-kexec load KERNEL INITRD CMDLINE    the next kernel, started by `hvstor-kexec exec`
//   hvstor-kexec crash KERNEL INITRD CMDLINE   the capture kernel, started by a panic (kdump;
//                                              needs crashkernel= on the command line)
//   hvstor-kexec exec                          syncs and starts the loaded kernel, after the
//                                              kernel shut its devices down (VMBus UNLOADs)
//
// Through kexec_file_load(2): the kernel reads and checks the image itself.
#include <fcntl.h>
#include <linux/reboot.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

constexpr unsigned long kFileOnCrash = 0x2;  // KEXEC_FILE_ON_CRASH

int usage() {
    std::fprintf(stderr, "usage: hvstor-kexec load|crash KERNEL INITRD CMDLINE | hvstor-kexec exec\n");
    return 2;
}

int open_or_say(const char* path) {
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) std::fprintf(stderr, "hvstor-kexec: %s: %s\n", path, std::strerror(errno));
    return fd;
}

int load(bool crash, const char* kernel, const char* initrd, const std::string& cmdline) {
    const int kfd = open_or_say(kernel);
    const int ifd = kfd < 0 ? -1 : open_or_say(initrd);
    if (kfd < 0 || ifd < 0) return 1;
    // The length counts the terminating NUL.
    const long rc = ::syscall(SYS_kexec_file_load, kfd, ifd, cmdline.size() + 1, cmdline.c_str(),
                              crash ? kFileOnCrash : 0UL);
    if (rc != 0) {
        std::fprintf(stderr, "hvstor-kexec: kexec_file_load(%s, %s%s): %s\n", kernel, initrd,
                     crash ? ", on crash" : "", std::strerror(errno));
        return 1;
    }
    return 0;
}

int exec_loaded() {
    ::sync();
    ::syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2, LINUX_REBOOT_CMD_KEXEC, nullptr);
    std::fprintf(stderr, "hvstor-kexec: reboot(KEXEC): %s\n", std::strerror(errno));
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "exec") == 0) return exec_loaded();
    if (argc != 5) return usage();
    const bool crash = std::strcmp(argv[1], "crash") == 0;
    if (!crash && std::strcmp(argv[1], "load") != 0) return usage();
    return load(crash, argv[2], argv[3], argv[4]);
}
