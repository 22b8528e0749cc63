//! The server's implementation of [`Admin`]: what commands ask of
//! persistence, replication and the server, answered by the subsystem
//! that owns it. Every method is a one-line forward; the point is that the
//! commands layer does not name these subsystems (docs/ARCHITECTURE.md,
//! "Layers").

use std::any::Any;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::Server;
use crate::commands::CmdError;
use crate::core::admin::{Admin, Reload};
use crate::core::Core;
use crate::persistence::{aof, load, save};

impl Admin for Arc<Server> {
    fn core(&self) -> &Core {
        &self.core
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn info(&self, sections: &[&str]) -> String {
        super::info::info_text(self, sections)
    }

    fn save(&self) -> Result<(), CmdError> {
        save::save(self)
    }

    fn bgsave(&self, schedule: bool, in_exec: bool) -> Result<&'static str, CmdError> {
        save::bgsave(self, schedule, in_exec)
    }

    fn bgrewriteaof(&self) -> Result<&'static str, CmdError> {
        aof::bgrewriteaof(self)
    }

    fn abort_bgsave(&self) {
        save::abort_bgsave(self)
    }

    fn abort_shutdown(&self) -> bool {
        self.shutdown.abort()
    }

    fn reset_stats(&self) {
        // Redis's resetServerStats: stat_sync_full, _partial_ok, _partial_err.
        let m = &self.repl.master;
        for c in [&m.sync_full, &m.sync_partial_ok, &m.sync_partial_err] {
            c.store(0, Relaxed);
        }
    }

    fn lastsave(&self) -> u64 {
        self.lastsave_unix.load(Relaxed)
    }

    fn loading(&self) -> bool {
        let l = &self.persist.loading;
        l.active() || l.async_active()
    }

    fn config_changed(&self) -> Result<(), String> {
        crate::replication::config_changed(&**self);
        if self.core.active {
            crate::replication::active::update_quorum(&self.repl.active, &self.core);
        }
        aof::config_changed(self)
    }

    fn listen_on(&self, tls: bool, port: u16, cfg: &crate::config::Config) -> Result<(), String> {
        Server::listen_on(self, tls, port, cfg)
    }

    fn debug_reload(&self, steps: Reload) -> Result<(), CmdError> {
        load::debug_reload(self, steps)
    }

    fn debug_aof_flush_sleep(&self, us: u64) {
        aof::set_flush_sleep(self, us)
    }

    fn debug_loadaof(&self) {
        aof::debug_loadaof(self)
    }

    fn is_replica(&self) -> bool {
        self.repl.is_replica()
    }

    fn hold_master_link(&self, d: Duration) {
        self.repl.replica.debug_sleep(d)
    }

    fn kill_master_link_if(&self, hit: &dyn Fn(&str, &str) -> bool) -> bool {
        self.repl.replica.kill_link_if(hit)
    }

    fn admit(
        &self,
        client: &mut crate::core::client::ClientState,
        id: usize,
        flags: u32,
    ) -> Result<(), CmdError> {
        super::hooks::admit(self, client, id, flags)
    }

    fn disk_write_error(&self) -> bool {
        save::disk_error(self).is_some() || aof::disk_error(self).is_some()
    }

    fn serving_stale(&self) -> bool {
        self.repl.is_replica()
            && !self.repl.replica.link_up()
            && !self.hot.replication.serve_stale_data.load(Relaxed)
    }
}
