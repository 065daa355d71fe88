import { describe, expect, it } from 'vitest';
import { layers, layoutStages, NODE_W } from './layout';

const stage = (name: string, ...needs: string[]) => ({ name, needs });

describe('layoutStages', () => {
  it('puts each stage one column right of the deepest stage it needs', () => {
    const { nodes, width } = layoutStages([stage('sft'), stage('rm', 'sft'), stage('ppo', 'sft', 'rm')]);
    expect(nodes.map((n) => [n.name, n.layer, n.row])).toEqual([['sft', 0, 0], ['rm', 1, 0], ['ppo', 2, 0]]);
    expect(nodes[0]!.x).toBe(0);
    expect(nodes[1]!.x).toBeGreaterThan(NODE_W);
    expect(nodes[2]!.x).toBeGreaterThan(nodes[1]!.x + NODE_W);
    expect(width).toBe(nodes[2]!.x + NODE_W);
  });

  it('routes an edge that skips a column through the lane above the boxes, and adjacent ones straight across', () => {
    const { nodes, edges } = layoutStages([stage('sft'), stage('rm', 'sft'), stage('ppo', 'sft', 'rm')]);
    const top = Math.min(...nodes.map((n) => n.y));
    expect(top).toBeGreaterThan(0);
    const skip = edges.find((e) => e.from === 'sft' && e.to === 'ppo')!;
    const laneY = Number(/L[\d.]+,([\d.]+)/.exec(skip.d)![1]);
    expect(laneY).toBeLessThan(top);
    const across = edges.find((e) => e.from === 'rm' && e.to === 'ppo')!;
    expect(across.d).not.toContain('L');
    // ppo's two needs arrive at two heights, one arrowhead each; the one from the lane above takes the upper.
    const end = (d: string) => Number(d.split(' ').at(-1)!.split(',')[1]);
    expect(end(skip.d)).toBeLessThan(end(across.d));
  });

  it('stacks parallel stages in a column, ordered by what feeds them, and centres shorter columns', () => {
    const { nodes } = layoutStages([stage('a'), stage('b'), stage('from-b', 'b'), stage('from-a', 'a'), stage('join', 'from-a', 'from-b')]);
    const at = Object.fromEntries(nodes.map((n) => [n.name, n]));
    expect([at.a!.row, at.b!.row]).toEqual([0, 1]);
    expect([at['from-a']!.row, at['from-b']!.row]).toEqual([0, 1]); // level with a and b, not in document order
    expect(at.join!.y).toBeGreaterThan(at.a!.y);
    expect(at.join!.y).toBeLessThan(at.b!.y);
    expect(layoutStages([stage('a'), stage('b')]).edges).toEqual([]);
  });

  it('ignores needs it does not know, and survives a cycle the API should have refused', () => {
    expect(Object.fromEntries(layers([stage('a', 'ghost'), stage('b', 'a')]))).toEqual({ a: 0, b: 1 });
    const cyclic = layoutStages([stage('a', 'b'), stage('b', 'a')]);
    expect(cyclic.nodes).toHaveLength(2);
    expect(layoutStages([])).toEqual({ nodes: [], edges: [], width: 0, height: 0 });
  });
});
