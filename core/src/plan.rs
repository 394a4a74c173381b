//! The [`Plan`]: the stage DAG of a valid manifest, in the order stages run.
//!
//! Edges point from a stage to the stages that need it. The run order is a topological
//! order that keeps the manifest's order among independent stages, so output is stable.

use manifests::Manifest;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;

/// Output formats of `pipeline graph`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphFormat {
    Dot,
    Mermaid,
}

#[derive(Debug, Clone)]
pub struct Plan {
    /// Node weights are indices into `Manifest::stages`.
    pub graph: DiGraph<usize, ()>,
    /// Stage indices in the order they run.
    pub order: Vec<usize>,
}

/// Builds the stage graph; references to unknown stages are skipped (check reports them).
pub fn stage_graph(manifest: &Manifest) -> DiGraph<usize, ()> {
    let mut graph = DiGraph::new();
    let nodes: Vec<NodeIndex> = (0..manifest.stages.len())
        .map(|i| graph.add_node(i))
        .collect();
    // The first stage of each name (as a search from the start would find it).
    let mut by_name: HashMap<&str, usize> = HashMap::with_capacity(manifest.stages.len());
    for (j, stage) in manifest.stages.iter().enumerate() {
        by_name.entry(stage.name.value.as_str()).or_insert(j);
    }
    for (i, stage) in manifest.stages.iter().enumerate() {
        for need in &stage.needs {
            if let Some(&j) = by_name.get(need.value.as_str()) {
                graph.update_edge(nodes[j], nodes[i], ());
            }
        }
    }
    graph
}

impl Plan {
    /// The plan of a manifest that passed `check` (no cycles, references resolved).
    pub fn new(manifest: &Manifest) -> Plan {
        let graph = stage_graph(manifest);
        // Kahn's algorithm, always taking the ready stage that comes first in the file.
        let mut indegree: Vec<usize> = graph
            .node_indices()
            .map(|n| graph.neighbors_directed(n, Direction::Incoming).count())
            .collect();
        let mut ready: BTreeSet<usize> =
            (0..indegree.len()).filter(|&i| indegree[i] == 0).collect();
        let mut order = Vec::with_capacity(indegree.len());
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for edge in graph.edges(NodeIndex::new(i)) {
                let j = edge.target().index();
                indegree[j] -= 1;
                if indegree[j] == 0 {
                    ready.insert(j);
                }
            }
        }
        debug_assert_eq!(
            order.len(),
            manifest.stages.len(),
            "Plan::new on a manifest with a cycle"
        );
        Plan { graph, order }
    }

    /// `stage` and every stage reachable from it against (`Incoming`) or along
    /// (`Outgoing`) the edges.
    fn reachable(&self, stage: usize, direction: Direction) -> BTreeSet<usize> {
        let mut keep = BTreeSet::from([stage]);
        let mut todo = vec![stage];
        while let Some(i) = todo.pop() {
            for n in self.graph.neighbors_directed(NodeIndex::new(i), direction) {
                if keep.insert(n.index()) {
                    todo.push(n.index());
                }
            }
        }
        keep
    }

    /// The run order restricted to `stage` and everything it needs, transitively.
    pub fn upto(&self, stage: usize) -> Vec<usize> {
        let keep = self.reachable(stage, Direction::Incoming);
        self.order
            .iter()
            .copied()
            .filter(|i| keep.contains(i))
            .collect()
    }

    /// `stage` and every stage that needs it, transitively.
    pub fn downstream(&self, stage: usize) -> BTreeSet<usize> {
        self.reachable(stage, Direction::Outgoing)
    }

    /// The DAG as Graphviz DOT or a Mermaid flowchart.
    pub fn render(&self, manifest: &Manifest, format: GraphFormat) -> String {
        let mut out = String::new();
        let label = |i: usize| {
            let s = &manifest.stages[i];
            format!("{} ({})", s.name(), s.kind().as_str())
        };
        match format {
            GraphFormat::Dot => {
                let _ = writeln!(out, "digraph \"{}\" {{", manifest.name.replace('"', "\\\""));
                let _ = writeln!(out, "    rankdir=LR;");
                for &i in &self.order {
                    let shape = crate::stages::kind(manifest.stages[i].kind()).dot_shape;
                    let _ = writeln!(
                        out,
                        "    \"{}\" [label=\"{}\", shape={shape}];",
                        manifest.stages[i].name(),
                        label(i)
                    );
                }
                for e in self.graph.edge_references() {
                    let (a, b) = (self.graph[e.source()], self.graph[e.target()]);
                    let _ = writeln!(
                        out,
                        "    \"{}\" -> \"{}\";",
                        manifest.stages[a].name(),
                        manifest.stages[b].name()
                    );
                }
                out.push_str("}\n");
            }
            GraphFormat::Mermaid => {
                out.push_str("flowchart LR\n");
                let id = |i: usize| format!("s{i}");
                for &i in &self.order {
                    let (open, close) =
                        crate::stages::kind(manifest.stages[i].kind()).mermaid_shape;
                    let _ = writeln!(out, "    {}{open}\"{}\"{close}", id(i), label(i));
                }
                for e in self.graph.edge_references() {
                    let _ = writeln!(
                        out,
                        "    {} --> {}",
                        id(self.graph[e.source()]),
                        id(self.graph[e.target()])
                    );
                }
            }
        }
        out
    }
}
