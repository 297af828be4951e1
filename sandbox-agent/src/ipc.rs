//! System V IPC objects — shared memory segments, message queues, semaphore sets — that a
//! benchmark user (or the builder) left in the sandbox's IPC namespace: removed after every
//! phase, so trial k cannot attach to what trial k−1 made and come out faster. (POSIX shared
//! memory and message queues are files, in `/dev/shm` and `/dev/mqueue`: the shared places'
//! sweep takes them, [`crate::isolation`].)
//!
//! They are listed from `/proc/sysvipc`. Removing another user's object (`IPC_RMID`) takes its
//! owner's or creator's uid or `CAP_SYS_ADMIN`, which the agent has not: each is removed from a
//! thread of its own whose real, effective and saved uid become the owner's (credentials are per
//! thread in the kernel, and rustix's calls change only the calling thread's); the thread ends
//! with the removal.

use std::path::Path;

/// What kind of object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SharedMemory,
    MessageQueue,
    Semaphores,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::SharedMemory, Kind::MessageQueue, Kind::Semaphores];

    /// Its file under `/proc/sysvipc`, and the column naming its id there.
    fn table(self) -> (&'static str, &'static str) {
        match self {
            Kind::SharedMemory => ("shm", "shmid"),
            Kind::MessageQueue => ("msg", "msqid"),
            Kind::Semaphores => ("sem", "semid"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::SharedMemory => "System V shared memory segment",
            Kind::MessageQueue => "System V message queue",
            Kind::Semaphores => "System V semaphore set",
        }
    }
}

/// One object, as `/proc/sysvipc` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub kind: Kind,
    pub id: i32,
    /// The owner's uid, and the creator's.
    pub uid: u32,
    pub cuid: u32,
}

/// The objects of one `/proc/sysvipc` table (a header line naming the columns, then one object a
/// line); lines it cannot read are skipped.
pub fn parse(kind: Kind, text: &str) -> Vec<Object> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Vec::new() };
    let columns: Vec<&str> = header.split_whitespace().collect();
    let at = |name: &str| columns.iter().position(|c| *c == name);
    let (Some(id_at), Some(uid_at), Some(cuid_at)) = (at(kind.table().1), at("uid"), at("cuid")) else {
        return Vec::new();
    };
    lines
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some(Object {
                kind,
                id: fields.get(id_at)?.parse().ok()?,
                uid: fields.get(uid_at)?.parse().ok()?,
                cuid: fields.get(cuid_at)?.parse().ok()?,
            })
        })
        .collect()
}

/// Every object of the namespace, from `proc` (`/proc/sysvipc`); none where a table cannot be read.
pub fn list(proc: &Path) -> Vec<Object> {
    Kind::ALL
        .iter()
        .flat_map(|kind| parse(*kind, &std::fs::read_to_string(proc.join(kind.table().0)).unwrap_or_default()))
        .collect()
}

/// What a sweep removed (object, owner) and could not (object, why), as warnings' text.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub removed: Vec<String>,
    pub failed: Vec<String>,
}

/// Removes every object of `proc`'s namespace owned or created by a non-root user.
pub fn sweep(proc: &Path) -> Swept {
    let mut swept = Swept::default();
    for object in list(proc).into_iter().filter(|o| o.uid != 0 || o.cuid != 0) {
        let shown = format!("{} {} (owner uid {})", object.kind.name(), object.id, object.uid);
        match remove(&object) {
            Ok(()) => swept.removed.push(shown),
            Err(err) => swept.failed.push(format!("{shown}: {err}")),
        }
    }
    swept
}

/// `IPC_RMID` of `object`, from a thread that takes its owner's uid (its creator's when the owner
/// is root).
fn remove(object: &Object) -> std::io::Result<()> {
    let uid = if object.uid != 0 { object.uid } else { object.cuid };
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new().name("ipc-rm".into()).spawn_scoped(scope, || {
            let id = rustix::process::Uid::from_raw(uid);
            rustix::thread::set_thread_res_uid(id, id, id)?;
            // SAFETY: IPC_RMID takes no buffer (null is what the manual pages pass); the id is
            // a plain integer, and a stale one only makes the call fail.
            let rc = unsafe {
                match object.kind {
                    Kind::SharedMemory => libc::shmctl(object.id, libc::IPC_RMID, std::ptr::null_mut()),
                    Kind::MessageQueue => libc::msgctl(object.id, libc::IPC_RMID, std::ptr::null_mut()),
                    Kind::Semaphores => libc::semctl(object.id, 0, libc::IPC_RMID),
                }
            };
            if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
        })?;
        thread.join().unwrap_or_else(|_| Err(std::io::Error::other("the thread removing an IPC object panicked")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_three_tables_by_their_headers() {
        let shm = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
                   -1347886019          0   666                  4096    10     0      0  2001  2001  2001  2001          0          0 1796371948                     0                     0\n\
                   0          5   600                  4096    10     0      0     0     0  2002     0          0          0 1796371948                     0                     0\n";
        let msg = "       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  cgid      stime      rtime      ctime\n\
                   640580393          3   666           0          0     0     0  2001  2001  2001  2001          0          0 1796371948\n";
        let sem = "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n\
                   502658868          7   666          1  2003  2003  2003  2003          0 1796371948\n\
                   broken line\n";
        assert_eq!(
            parse(Kind::SharedMemory, shm),
            [
                Object { kind: Kind::SharedMemory, id: 0, uid: 2001, cuid: 2001 },
                Object { kind: Kind::SharedMemory, id: 5, uid: 0, cuid: 2002 },
            ]
        );
        assert_eq!(parse(Kind::MessageQueue, msg), [Object { kind: Kind::MessageQueue, id: 3, uid: 2001, cuid: 2001 }]);
        assert_eq!(parse(Kind::Semaphores, sem), [Object { kind: Kind::Semaphores, id: 7, uid: 2003, cuid: 2003 }]);
        assert_eq!(parse(Kind::Semaphores, ""), []);
        assert_eq!(parse(Kind::Semaphores, msg), [], "a table of another kind has no semid");
    }
}
