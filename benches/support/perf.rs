//! `perf record` of a gateway process for the load tools (`proxy`, `load`):
//! `-F freq --call-graph dwarf` on every thread of one pid, written to
//! `<dir>/gateway-<name>.perf.data`, until stopped. Shared so both benches
//! profile the same way and their reports compare.

/// A running `perf record` attached to one gateway.
pub struct Perf(std::process::Child);

impl Perf {
    /// Attaches to `pid`; give it a moment before the measured work starts.
    pub fn start(dir: &std::path::Path, pid: u32, name: &str, freq: &str) -> Perf {
        std::fs::create_dir_all(dir).unwrap();
        let out = dir.join(format!("gateway-{name}.perf.data"));
        let child = std::process::Command::new("perf")
            .args(["record", "-F", freq, "--call-graph", "dwarf,16384", "-p"])
            .arg(pid.to_string())
            .arg("-o")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("perf (Debian: apt-get install linux-perf)");
        eprintln!("  perf recording gateway {pid} → {}", out.display());
        Perf(child)
    }

    /// Stops recording (SIGINT, so perf writes its file) and waits for it.
    pub fn stop(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}
