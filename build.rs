//! Compiles the vendored AG-UI protobuf schema (proto/ag_ui/events.proto)
//! into a descriptor set with protox, a pure-Rust protobuf compiler: the
//! build needs no `protoc` on the machine. The gateway encodes with
//! prost-reflect over this descriptor (see src/server/encode/proto.rs).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["ag_ui/events.proto"], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("ag_ui.bin");
    std::fs::write(out, prost::Message::encode_to_vec(&fds))?;
    Ok(())
}
