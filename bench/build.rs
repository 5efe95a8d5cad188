//! Compiles the hand-written subset of etcd's v3 API (`proto/etcd.proto`, `proto/kv.proto`)
//! with protox, so the build needs no system `protoc`. Only the client side is generated.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["etcd.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
