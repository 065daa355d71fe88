/*
 * Where each stage's box goes: layered left to right by dependency depth (a stage sits one column right of the
 * deepest stage it needs), top to bottom within a column. Pipelines have a handful of stages, so this is the
 * simple layered layout, not a graph library: every box has one size, and each column is ordered by where its
 * stages' needs sit, which keeps edges from crossing in the usual chains and fan-ins. An edge that skips a
 * column (ppo needing sft past rm) would run under the boxes between, so it climbs to a lane above them all.
 */

export const NODE_W = 250;
export const NODE_H = 156;
const GAP_X = 72;
const GAP_Y = 20;
/** Height of the lane above the boxes that column-skipping edges run along. */
const LANE = 28;

export interface LaidNode {
  name: string;
  layer: number;
  row: number;
  x: number;
  y: number;
}

export interface LaidEdge {
  from: string;
  to: string;
  /** An SVG path from the right side of `from`'s box to the left side of `to`'s. */
  d: string;
}

export interface Layout {
  nodes: LaidNode[];
  edges: LaidEdge[];
  width: number;
  height: number;
}

type StageLike = { name: string; needs: readonly string[] };

/** Each stage's column: 0 for a stage that needs none, else one past the deepest of its needs. */
export function layers(stages: readonly StageLike[]): Map<string, number> {
  const needs = new Map(stages.map((s) => [s.name, s.needs]));
  const depth = new Map<string, number>();
  const visiting = new Set<string>();
  const visit = (name: string): number => {
    const known = depth.get(name);
    if (known != null) return known;
    // The API refuses cycles; should one arrive anyway, cut it here rather than recurse forever.
    if (visiting.has(name)) return 0;
    visiting.add(name);
    const parents = (needs.get(name) ?? []).filter((n) => needs.has(n));
    const d = parents.length ? 1 + Math.max(...parents.map(visit)) : 0;
    visiting.delete(name);
    depth.set(name, d);
    return d;
  };
  for (const s of stages) visit(s.name);
  // Without cycles the depths run 0..n with no gap; a cut cycle can leave one, and an empty column would show as a hole.
  const used = [...new Set(depth.values())].sort((a, b) => a - b);
  return new Map([...depth].map(([name, d]) => [name, used.indexOf(d)]));
}

export function layoutStages(stages: readonly StageLike[]): Layout {
  const depth = layers(stages);
  const columns: StageLike[][] = [];
  for (const s of stages) (columns[depth.get(s.name)!] ??= []).push(s);

  const rowOf = new Map<string, number>();
  for (const column of columns) {
    // Mean row of its needs, then the document's order: a stage sits level with what feeds it.
    const key = (s: StageLike) => {
      const rows = s.needs.map((n) => rowOf.get(n)).filter((r): r is number => r != null);
      return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : 0;
    };
    const ordered = column.map((s, i) => ({ s, i, k: key(s) })).sort((a, b) => a.k - b.k || a.i - b.i);
    ordered.forEach(({ s }, row) => rowOf.set(s.name, row));
  }

  const skips = stages.some((s) => s.needs.some((n) => depth.has(n) && depth.get(s.name)! - depth.get(n)! > 1));
  const top = skips ? LANE : 0;
  const tallest = Math.max(0, ...columns.map((c) => c.length));
  const height = tallest ? top + tallest * NODE_H + (tallest - 1) * GAP_Y : 0;
  const nodes = stages.map((s): LaidNode => {
    const layer = depth.get(s.name)!;
    const row = rowOf.get(s.name)!;
    // Shorter columns are centred against the tallest.
    const offset = ((tallest - columns[layer]!.length) * (NODE_H + GAP_Y)) / 2;
    return { name: s.name, layer, row, x: layer * (NODE_W + GAP_X), y: top + offset + row * (NODE_H + GAP_Y) };
  });

  const edges = route(stages, new Map(nodes.map((n) => [n.name, n])), top / 2);
  const width = columns.length ? columns.length * NODE_W + (columns.length - 1) * GAP_X : 0;
  return { nodes, edges, width, height };
}

interface Arc {
  from: LaidNode;
  to: LaidNode;
  skips: boolean;
}

function route(stages: readonly StageLike[], at: Map<string, LaidNode>, lane: number): LaidEdge[] {
  const arcs: Arc[] = stages.flatMap((s) => {
    const to = at.get(s.name)!;
    return s.needs.flatMap((n) => {
      const from = at.get(n);
      return from ? [{ from, to, skips: to.layer - from.layer > 1 }] : [];
    });
  });
  // A box's edges leave (and arrive) at separate heights on its side, in the order of the boxes at their other
  // ends, so a fan-in shows one arrowhead per need; lane edges take the top ports, being headed up.
  const out = ports(arcs, (l) => l.from, (l) => l.to);
  const into = ports(arcs, (l) => l.to, (l) => l.from);
  return arcs.map((l) => {
    const a = { x: l.from.x + NODE_W, y: out.get(l)! };
    const b = { x: l.to.x, y: into.get(l)! };
    return { from: l.from.name, to: l.to.name, d: l.skips ? overTheTop(a, b, lane) : curve(a, b) };
  });
}

function ports(arcs: Arc[], own: (l: Arc) => LaidNode, other: (l: Arc) => LaidNode): Map<Arc, number> {
  const byNode = new Map<LaidNode, Arc[]>();
  for (const l of arcs) byNode.set(own(l), [...(byNode.get(own(l)) ?? []), l]);
  const ys = new Map<Arc, number>();
  for (const [node, mine] of byNode) {
    mine.sort((a, b) => Number(b.skips) - Number(a.skips) || other(a).y - other(b).y);
    mine.forEach((l, k) => ys.set(l, node.y + (NODE_H * (k + 1)) / (mine.length + 1)));
  }
  return ys;
}

type Point = { x: number; y: number };

function curve(a: Point, b: Point): string {
  const h = GAP_X / 2;
  return `M${a.x},${a.y} C${a.x + h},${a.y} ${b.x - h},${b.y} ${b.x},${b.y}`;
}

/** Up into the lane in the gap after the source's column, along it, and down in the gap before the target's. */
function overTheTop(a: Point, b: Point, lane: number): string {
  const h = GAP_X / 2;
  return `M${a.x},${a.y} C${a.x + h},${a.y} ${a.x},${lane} ${a.x + h},${lane} L${b.x - h},${lane} C${b.x},${lane} ${b.x - h},${b.y} ${b.x},${b.y}`;
}
