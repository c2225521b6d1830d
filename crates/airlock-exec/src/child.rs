//! The child's side of a sandboxed run, between `fork` and `exec`, and the
//! few other system calls the crate needs.
//!
//! This is the only module of airlock with `unsafe` code. Between `fork` and
//! `exec` in a process that has threads, nothing may allocate or take a lock
//! another thread could hold: every path and every text is prepared by the
//! parent ([`Prepared`]), and the child only makes system calls on them.
//!
//! The order, in the child of `Command::spawn`:
//! 1. its own process group (the parent kills the group on timeout or
//!    cancellation), and the run's pids and memory cgroups when there are;
//! 2. new user, mount, pid (and, without network, network) namespaces, the
//!    caller's uid and gid mapped to themselves;
//! 3. mounts, private to the namespace: the overlay over the workspace (for a
//!    preview); without Landlock, the writable paths bound onto themselves;
//!    an empty read-only tmpfs over each hidden path (airlock's state dir),
//!    read-only binds of the read-only paths (the config file, `.git`
//!    directories outside a preview); without Landlock, every other mount
//!    remounted read-only;
//! 4. a `fork`: the grandchild is the new pid namespace's init, so when it
//!    ends, or is killed, every process it started ends with it; the child
//!    waits for it and exits as it did;
//! 5. in the grandchild: a read-only `/proc` of its namespace, the working
//!    directory, resource limits, Landlock where the kernel has it (the file
//!    system read-only but for the workspace, a temporary directory and a
//!    few devices; no mount), every capability dropped; then `exec`.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

/// Landlock's file access rights (`linux/landlock.h`).
mod access {
    pub const EXECUTE: u64 = 1 << 0;
    pub const WRITE_FILE: u64 = 1 << 1;
    pub const READ_FILE: u64 = 1 << 2;
    pub const READ_DIR: u64 = 1 << 3;
    pub const TRUNCATE: u64 = 1 << 14;
    pub const IOCTL_DEV: u64 = 1 << 15;
}

/// The rights Landlock ABI `abi` knows.
pub(crate) fn handled_rights(abi: i64) -> u64 {
    let mut rights = (1 << 13) - 1;
    if abi >= 2 {
        rights |= 1 << 13; // REFER
    }
    if abi >= 3 {
        rights |= access::TRUNCATE;
    }
    if abi >= 5 {
        rights |= access::IOCTL_DEV;
    }
    rights
}

/// The Landlock ABI the kernel offers (0: none).
pub(crate) fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute and size 0 and the VERSION flag, the call
    // only returns the ABI version; it reads and writes no memory.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    abi.max(0)
}

/// Everything the child needs, made by the parent.
pub(crate) struct Prepared {
    pub setgroups_path: CString,
    pub uid_map_path: CString,
    pub gid_map_path: CString,
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
    pub network: bool,
    /// The workspace root and the overlay's mount options.
    pub overlay: Option<(CString, CString)>,
    pub hidden: Vec<CString>,
    /// Hidden files: an empty file (`null`) bound over each, read-only,
    /// with the mount flags its mount has to keep.
    pub hidden_files: Vec<CString>,
    pub null: CString,
    pub null_flags: libc::c_ulong,
    /// A read-only path and the mount flags its mount has to keep.
    pub read_only: Vec<(CString, libc::c_ulong)>,
    pub cwd: CString,
    /// Where the run may write: the workspace root and its temporary dir.
    pub writable: Vec<CString>,
    /// Devices it may read and write (`/dev/null` …).
    pub devices: Vec<CString>,
    /// The Landlock ABI to confine with; 0: none, and `remount` confines.
    pub abi: i64,
    /// Without Landlock: every mount point to remount read-only (after the
    /// writable paths are bound onto themselves), with the mount flags its
    /// mount has to keep.
    pub remount: Vec<(CString, libc::c_ulong)>,
    /// `cgroup.procs` of the run's cgroups, opened.
    pub cgroup_procs: Vec<RawFd>,
    pub max_processes: u64,
    /// `RLIMIT_DATA` (0: none).
    pub max_memory_bytes: u64,
    pub cpu_seconds: u64,
    /// The spawning process (see [`die_with_parent`]).
    pub parent: libc::pid_t,
}

/// C strings the child uses that never change.
struct Fixed;

impl Fixed {
    const ROOT: &'static [u8] = b"/\0";
    const PROC: &'static [u8] = b"/proc\0";
    const PROC_FS: &'static [u8] = b"proc\0";
    const OVERLAY: &'static [u8] = b"overlay\0";
    const TMPFS: &'static [u8] = b"tmpfs\0";
    const HIDDEN_OPTIONS: &'static [u8] = b"size=4k,mode=000\0";
    const ZERO: &'static [u8] = b"0";
    const DENY: &'static [u8] = b"deny";
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Writes `bytes` to the file at `path` (allocation-free).
///
/// # Safety
/// `path` must be a valid C string.
unsafe fn write_file(path: &CString, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a valid C string; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is open and `bytes` is a valid buffer.
    let result = unsafe { write_all(fd, bytes) };
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    result
}

/// # Safety
/// `fd` must be an open descriptor.
unsafe fn write_all(fd: RawFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid buffer of its length.
        let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if written < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        bytes = &bytes[written.unsigned_abs()..];
    }
    Ok(())
}

fn ptr(bytes: &'static [u8]) -> *const libc::c_char {
    bytes.as_ptr().cast()
}

/// Runs in the child of `spawn`, before `exec`. Allocation-free.
///
/// # Safety
/// Only between `fork` and `exec` (from `CommandExt::pre_exec`).
pub(crate) unsafe fn setup(prepared: &Prepared) -> io::Result<()> {
    // SAFETY (whole function): every pointer passed is a valid C string or
    // buffer owned by `prepared` or a static; the calls allocate nothing.
    unsafe {
        check(libc::setpgid(0, 0))?;
        die_with_parent(prepared.parent)?;
        for &fd in &prepared.cgroup_procs {
            write_all(fd, Fixed::ZERO)?;
            libc::close(fd);
        }
        let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID;
        if !prepared.network {
            flags |= libc::CLONE_NEWNET;
        }
        check(libc::unshare(flags))?;
        write_file(&prepared.setgroups_path, Fixed::DENY)?;
        write_file(&prepared.uid_map_path, &prepared.uid_map)?;
        write_file(&prepared.gid_map_path, &prepared.gid_map)?;
        check(libc::mount(
            std::ptr::null(),
            ptr(Fixed::ROOT),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        if let Some((root, options)) = &prepared.overlay {
            check(libc::mount(
                ptr(Fixed::OVERLAY),
                root.as_ptr(),
                ptr(Fixed::OVERLAY),
                0,
                options.as_ptr().cast(),
            ))?;
        }
        if prepared.abi < 1 {
            // Without Landlock the writable paths become mounts of their
            // own, which the read-only remounts below leave writable.
            for path in &prepared.writable {
                check(libc::mount(
                    path.as_ptr(),
                    path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
            }
        }
        for hidden in &prepared.hidden {
            check(libc::mount(
                ptr(Fixed::TMPFS),
                hidden.as_ptr(),
                ptr(Fixed::TMPFS),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                ptr(Fixed::HIDDEN_OPTIONS).cast(),
            ))?;
        }
        for path in &prepared.hidden_files {
            check(libc::mount(
                prepared.null.as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                std::ptr::null(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | prepared.null_flags,
                std::ptr::null(),
            ))?;
        }
        for (path, keep) in &prepared.read_only {
            check(libc::mount(
                path.as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                std::ptr::null(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | keep,
                std::ptr::null(),
            ))?;
        }

        for (path, keep) in &prepared.remount {
            check(libc::mount(
                std::ptr::null(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | keep,
                std::ptr::null(),
            ))?;
        }

        // How the command ended, from the namespace's init to the child.
        let mut status_pipe = [0; 2];
        check(libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC))?;
        let [status_read, status_write] = status_pipe;

        // The next process is the pid namespace's init.
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid > 0 {
            libc::close(status_write);
            wait_and_exit(pid, status_read);
        }

        // The grandchild, pid 1 of its namespace: it ends if the child is
        // killed, and every process of the namespace ends with it.
        libc::close(status_read);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // Its own /proc, where it can be mounted (else the host's, already
        // read-only), read-only: the command's uid may be the host's root,
        // whom a writable /proc/sys would obey.
        libc::mount(
            ptr(Fixed::PROC_FS),
            ptr(Fixed::PROC),
            ptr(Fixed::PROC_FS),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
            std::ptr::null(),
        );
        // The command runs as its child, with the signals any process has
        // (pid 1 ignores the ones it has no handler for).
        let command = libc::fork();
        if command < 0 {
            return Err(io::Error::last_os_error());
        }
        if command > 0 {
            reap_and_exit(command, status_write);
        }
        libc::close(status_write);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        check(libc::chdir(prepared.cwd.as_ptr()))?;
        set_limit(libc::RLIMIT_NPROC, prepared.max_processes)?;
        set_limit(libc::RLIMIT_CPU, prepared.cpu_seconds)?;
        set_limit(libc::RLIMIT_CORE, 0)?;
        if prepared.max_memory_bytes > 0 {
            set_limit(libc::RLIMIT_DATA, prepared.max_memory_bytes)?;
        }
        if prepared.abi >= 1 {
            landlock(prepared)?;
        } else {
            // What Landlock's rules would have: no new privileges.
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        }
        drop_capabilities()?;
    }
    Ok(())
}

/// # Safety
/// Between `fork` and `exec`.
unsafe fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `limit` is a valid rlimit.
    check(unsafe { libc::setrlimit(resource, &limit) })
}

/// Closes every descriptor but the standard ones and `keep`.
///
/// # Safety
/// Between `fork` and `exec`; `keep` stays open.
unsafe fn close_all_but(keep: RawFd) {
    let keep = u32::try_from(keep).unwrap_or(u32::MAX);
    // SAFETY: `close_range` takes integers and allocates nothing.
    unsafe {
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32);
        }
        libc::syscall(
            libc::SYS_close_range,
            keep.saturating_add(1),
            u32::MAX,
            0u32,
        );
    }
}

/// The namespace's init: reaps every process of the namespace until the
/// command ends, then tells the child how it ended and exits (which ends
/// whatever the command left running).
///
/// # Safety
/// Between `fork` and `exec`.
unsafe fn reap_and_exit(command: libc::pid_t, status_write: RawFd) -> ! {
    // SAFETY: closing descriptors, waiting and writing allocate nothing.
    unsafe {
        // Only the status pipe stays (so `spawn` returns at `exec`).
        close_all_but(status_write);
        let mut status = 0;
        loop {
            let mut reaped = 0;
            let waited = libc::waitpid(-1, &mut reaped, 0);
            if waited == command {
                status = reaped;
                break;
            }
            if waited < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
        let _ = write_all(status_write, &status.to_ne_bytes());
        libc::_exit(0)
    }
}

/// The child after the fork: waits for the namespace's init and ends as the
/// command did. It keeps no descriptor but the standard ones and the status
/// pipe, so the parent's `spawn` (which waits for its error pipe to close)
/// returns at `exec`.
///
/// # Safety
/// Between `fork` and `exec`.
unsafe fn wait_and_exit(pid: libc::pid_t, status_read: RawFd) -> ! {
    // SAFETY: closing descriptors, waiting and reading allocate nothing.
    unsafe {
        close_all_but(status_read);
        let mut status = 0;
        loop {
            let waited = libc::waitpid(pid, &mut status, 0);
            if waited == pid {
                break;
            }
            if waited < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                libc::_exit(126);
            }
        }
        // The command's own status, when the init could tell it.
        let mut word = [0u8; 4];
        let mut got = 0;
        while got < word.len() {
            let read = libc::read(
                status_read,
                word[got..].as_mut_ptr().cast(),
                word.len() - got,
            );
            if read <= 0 {
                break;
            }
            got += read.unsigned_abs();
        }
        if got == word.len() {
            status = i32::from_ne_bytes(word);
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(126)
    }
}

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// Landlock: read and execute everywhere; everything in the writable
/// paths; read and write the devices; no mounts.
///
/// # Safety
/// Between `fork` and `exec`.
unsafe fn landlock(prepared: &Prepared) -> io::Result<()> {
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    let handled = handled_rights(prepared.abi);
    let attr = RulesetAttr {
        handled_access_fs: handled,
    };
    // SAFETY: `attr` is a valid ruleset attribute of the size given.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if ruleset < 0 {
        return Err(io::Error::last_os_error());
    }
    let ruleset = ruleset as libc::c_int;
    let file_rights = access::EXECUTE
        | access::WRITE_FILE
        | access::READ_FILE
        | (handled & (access::TRUNCATE | access::IOCTL_DEV));
    let read = access::EXECUTE | access::READ_FILE | access::READ_DIR;
    let root = [Fixed::ROOT];
    let rules = root
        .iter()
        .map(|path| (ptr(path), read, true))
        .chain(
            prepared
                .writable
                .iter()
                .map(|path| (path.as_ptr(), handled, true)),
        )
        .chain(
            prepared
                .devices
                .iter()
                .map(|path| (path.as_ptr(), file_rights, false)),
        );
    for (path, rights, required) in rules {
        // SAFETY: `path` is a valid C string; the descriptor is closed below.
        let fd = unsafe { libc::open(path, libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            if required {
                return Err(io::Error::last_os_error());
            }
            continue;
        }
        let beneath = PathBeneath {
            allowed_access: rights & handled,
            parent_fd: fd,
        };
        // SAFETY: `beneath` is a valid rule for this rule type.
        let added = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset,
                LANDLOCK_RULE_PATH_BENEATH,
                &beneath as *const PathBeneath,
                0u32,
            )
        };
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
        if added < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: plain calls on integers.
    unsafe {
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) < 0 {
            return Err(io::Error::last_os_error());
        }
        libc::close(ruleset);
    }
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// No capability in the namespace survives `exec` (the bounding set is
/// emptied, then the process's own sets).
///
/// # Safety
/// Between `fork` and `exec`.
unsafe fn drop_capabilities() -> io::Result<()> {
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    // SAFETY: plain calls on integers and valid structures.
    unsafe {
        for capability in 0..64 {
            // Past the last capability the kernel knows: EINVAL, ignored.
            libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The process is killed when the thread that spawned it ends (that thread
/// waits for the run, so only when airlock itself goes away, as on
/// Ctrl-C); in its own process group, nothing else would end it.
///
/// # Safety
/// Between `fork` and `exec`.
unsafe fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: plain calls on integers.
    unsafe {
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
        // The parent went away before the call: nobody will wait for it.
        if libc::getppid() != parent {
            libc::_exit(126);
        }
    }
    Ok(())
}

/// Adds only its own process group and [`die_with_parent`] to `command`
/// (`exec.sandbox: none`).
pub(crate) fn install_unconfined(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = pid();
    // SAFETY: the closure makes allocation-free calls only.
    unsafe {
        command.pre_exec(move || {
            check(libc::setpgid(0, 0))?;
            die_with_parent(parent)
        });
    }
}

/// The calling process's id.
pub(crate) fn pid() -> libc::pid_t {
    // SAFETY: a plain call.
    unsafe { libc::getpid() }
}

/// Adds `setup(prepared)` to `command`, to run in its child.
pub(crate) fn install(command: &mut std::process::Command, prepared: Prepared) {
    use std::os::unix::process::CommandExt;
    // SAFETY: `setup` is allocation-free and made for this place.
    unsafe {
        command.pre_exec(move || setup(&prepared));
    }
}

/// Sends `signal` to the process group `pid` leads.
pub(crate) fn signal_group(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: a plain call on integers.
    unsafe {
        libc::kill(-pid, signal);
    }
}

/// Kills the process group `pid` leads, and `pid` itself (in case the group
/// does not exist yet).
pub(crate) fn kill_group(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: plain calls on integers.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
        libc::kill(pid, libc::SIGKILL);
    }
}

/// The mount flags of the file system holding `path` that a read-only
/// bind remount must keep (`nosuid`, `nodev`, `noexec` … are locked in a
/// user namespace).
pub(crate) fn locked_flags(path: &CString) -> io::Result<libc::c_ulong> {
    // SAFETY: `stat` is written by the call; `path` is a valid C string.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    check(unsafe { libc::statvfs(path.as_ptr(), &mut stat) })?;
    let mut flags = 0;
    for (st, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if stat.f_flag & st != 0 {
            flags |= ms;
        }
    }
    Ok(flags)
}

/// Whether the overlay marked the directory at `path` opaque (it replaces
/// the lower one instead of merging with it).
pub(crate) fn is_opaque(path: &CString) -> bool {
    let mut value = [0u8; 4];
    for name in [
        &b"user.overlay.opaque\0"[..],
        &b"trusted.overlay.opaque\0"[..],
    ] {
        // SAFETY: valid C strings and a buffer of the size given.
        let size = unsafe {
            libc::lgetxattr(
                path.as_ptr(),
                name.as_ptr().cast(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        if size > 0 && value[0] == b'y' {
            return true;
        }
    }
    false
}

/// The caller's real uid and gid.
pub(crate) fn ids() -> (u32, u32) {
    // SAFETY: plain calls.
    unsafe { (libc::getuid(), libc::getgid()) }
}
