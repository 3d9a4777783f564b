//! Compiles the protobuf contracts in `proto/` with protox (pure Rust, so no system protoc is
//! needed), generates the tonic code, and writes the file descriptor set used for server
//! reflection. Everything is written to OUT_DIR.

use std::path::PathBuf;

const PROTO_ROOT: &str = "proto";
const PROTO_FILES: &[&str] = &[
    "toolplane/v1/meta.proto",
    "toolplane/v1/tool.proto",
    "toolplane/v1/discovery_service.proto",
    "toolplane/v1/health_service.proto",
    "toolplane/v1/invoke_service.proto",
    "toolplane/v1/provider_service.proto",
    "toolplane/v1/agent_service.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={PROTO_ROOT}");

    let mut compiler = protox::Compiler::new([PROTO_ROOT])?;
    compiler.include_imports(true).include_source_info(true);
    compiler.open_files(PROTO_FILES.iter().copied())?;
    std::fs::write(
        out_dir.join("toolplane_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        .emit_rerun_if_changed(false)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
