//! `baton-node` built with the `chaos` feature: the harness starts this in place of the
//! plain node so that it can skew each node's lease clock and delay its Raft traffic through
//! the file named in `BATON_CHAOS_FILE`. Otherwise identical to `baton-node`.

fn main() {
    baton_node::cli::main()
}
