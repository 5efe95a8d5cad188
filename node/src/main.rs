//! `baton-node`: runs one baton node (see `baton_node::cli`).

fn main() {
    baton_node::cli::main()
}
