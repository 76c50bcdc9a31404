//! Raft's messages between a region's nodes, over whatever carries them
//! (the peer links in a node, channels in tests): each call is one
//! request and one answer, JSON-encoded — a few small messages a second,
//! where a readable encoding costs nothing that shows.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use elsa_lattice::NodeId;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

use super::state::Command;
use super::{Node, RaftId, TypeConfig};

/// A request between two nodes' ownership groups.
#[derive(Serialize, Deserialize)]
pub enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<RaftId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A follower's command, for the leader to propose.
    Propose(Command),
}

/// Its answer.
#[derive(Serialize, Deserialize)]
pub enum Reply {
    Append(Result<AppendEntriesResponse<RaftId>, RaftError<RaftId>>),
    Vote(Result<VoteResponse<RaftId>, RaftError<RaftId>>),
    Snapshot(Result<InstallSnapshotResponse<RaftId>, RaftError<RaftId, InstallSnapshotError>>),
    /// The log index the command was committed at, or why not.
    Proposed(Result<u64, String>),
}

/// What carries one call to a node and brings its answer back.
#[async_trait]
pub trait Carrier: Send + Sync + 'static {
    /// Sends `request` to `to`'s ownership group; its answer, or why none.
    async fn call(&self, to: NodeId, request: Vec<u8>) -> Result<Vec<u8>, String>;
}

/// Raft's network: a [`Conn`] per peer, all over one carrier.
#[derive(Clone)]
pub struct Net(pub Arc<dyn Carrier>);

/// Calls to one peer.
pub struct Conn {
    carrier: Arc<dyn Carrier>,
    to: RaftId,
}

impl RaftNetworkFactory<TypeConfig> for Net {
    type Network = Conn;

    async fn new_client(&mut self, to: RaftId, _node: &Node) -> Conn {
        Conn {
            carrier: self.0.clone(),
            to,
        }
    }
}

/// One call over `carrier`, bounded by `ttl`.
pub async fn call(
    carrier: &dyn Carrier,
    to: RaftId,
    rpc: &Rpc,
    ttl: Duration,
) -> Result<Reply, String> {
    let bytes = serde_json::to_vec(rpc).map_err(|e| e.to_string())?;
    let node = NodeId::try_from(to).map_err(|_| format!("node id {to} out of range"))?;
    let answer = tokio::time::timeout(ttl, carrier.call(node, bytes))
        .await
        .map_err(|_| format!("node {to} did not answer in {ttl:?}"))??;
    serde_json::from_slice(&answer).map_err(|e| format!("node {to} answered garbage: {e}"))
}

impl Conn {
    async fn send<E: std::error::Error>(
        &self,
        rpc: Rpc,
        option: &RPCOption,
    ) -> Result<Reply, RPCError<RaftId, Node, E>> {
        call(&*self.carrier, self.to, &rpc, option.hard_ttl())
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&std::io::Error::other(e))))
    }
}

/// The error for an answer of the wrong kind.
fn wrong<E: std::error::Error>() -> RPCError<RaftId, Node, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "answer of another kind",
    )))
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<RaftId>, RPCError<RaftId, Node, RaftError<RaftId>>> {
        match self.send(Rpc::Append(rpc), &option).await? {
            Reply::Append(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e))),
            _ => Err(wrong()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<RaftId>,
        RPCError<RaftId, Node, RaftError<RaftId, InstallSnapshotError>>,
    > {
        match self.send(Rpc::Snapshot(rpc), &option).await? {
            Reply::Snapshot(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
            }
            _ => Err(wrong()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<RaftId>,
        option: RPCOption,
    ) -> Result<VoteResponse<RaftId>, RPCError<RaftId, Node, RaftError<RaftId>>> {
        match self.send(Rpc::Vote(rpc), &option).await? {
            Reply::Vote(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e))),
            _ => Err(wrong()),
        }
    }
}
