//! Generated protobuf and gRPC code for `toolplane.v1`, and the encoded file descriptor set
//! served through reflection. Nothing but generated code lives here: the rest of the crate says
//! `pb::X`.

#![allow(missing_docs, unreachable_pub, missing_debug_implementations)]
#![allow(clippy::all, clippy::pedantic)]

tonic::include_proto!("toolplane.v1");

/// The encoded `FileDescriptorSet` of every toolplane proto and its imports.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("toolplane_descriptor");
