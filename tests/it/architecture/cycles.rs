//! The cycles of a directed graph given by successor lists: Tarjan's strongly connected
//! components, and one shortest cycle through each.

use std::collections::{BTreeMap, BTreeSet};

/// Tarjan's algorithm: the strongly connected components of a graph given by successor lists.
pub fn strongly_connected(successors: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        successors: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.successors[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let n = successors.len();
    let mut s = State {
        successors,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.components
}

/// One cycle through a strongly connected component: the shortest path from its smallest member
/// back to itself, found breadth first inside the component, closed (first == last).
pub fn cycle_within(successors: &[Vec<usize>], component: &[usize]) -> Vec<usize> {
    let members: BTreeSet<usize> = component.iter().copied().collect();
    let start = *members.iter().next().expect("a component has a member");
    let mut parent: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in &successors[v] {
            if !members.contains(&w) {
                continue;
            }
            if w == start {
                let mut cycle = vec![v];
                while let Some(&up) = parent.get(cycle.last().expect("never empty")) {
                    cycle.push(up);
                }
                cycle.reverse();
                if cycle[0] != start {
                    cycle.insert(0, start);
                }
                cycle.push(start);
                return cycle;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = parent.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    vec![start, start]
}
