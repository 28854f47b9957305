//! Which server to try next (Java's `StaticHostProvider`): the connection string's servers in
//! a random order, tried round robin, and `update_server_list`'s probabilistic rebalancing
//! (seed 002).
//! Rules: no randomness of its own: every draw comes from `Rng`, seeded by the caller, so a
//! seed replays exactly; the probabilities are Java's (see `update`).

use super::connect_string::HostPort;

/// SplitMix64: a small deterministic generator for shuffles and rebalancing draws. Not for
/// anything secret.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from this seed (the same seed gives the same draws).
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n); 0 when n is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Shuffles `v` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// After `update` decided the client must move: the servers split into those of the old list
/// and the new ones, and the probability of picking a new one on each attempt.
#[derive(Debug, Clone)]
struct Reconfig {
    old: Vec<HostPort>,
    new: Vec<HostPort>,
    old_tried: usize,
    new_tried: usize,
    p_new: f64,
}

/// The server list and where the client is in it.
#[derive(Debug, Clone)]
pub struct HostProvider {
    servers: Vec<HostPort>,
    /// Index of the server last returned by `next_server`, if any.
    current: Option<usize>,
    /// Index of the server of the last successful connection (the first returned, at start).
    last: Option<usize>,
    reconfig: Option<Reconfig>,
    rng: Rng,
}

impl HostProvider {
    /// `servers` must not be empty (a parsed connection string never is).
    pub fn new(mut servers: Vec<HostPort>, mut rng: Rng) -> HostProvider {
        rng.shuffle(&mut servers);
        HostProvider { servers, current: None, last: None, reconfig: None, rng }
    }

    /// How many servers the list has.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// True when the list has no server.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The servers, in the (shuffled) order they are tried.
    pub fn servers(&self) -> &[HostPort] {
        &self.servers
    }

    /// Whether the next attempts follow a rebalancing decision (Java's reconfigMode).
    pub fn rebalancing(&self) -> bool {
        self.reconfig.is_some()
    }

    /// The server to try next, and whether every server has been tried since the last
    /// success (the caller then waits before connecting: Java's spin delay).
    pub fn next_server(&mut self) -> (HostPort, bool) {
        let mut back_off = false;
        if let Some(rc) = &mut self.reconfig {
            let take_new = self.rng.next_f64() <= rc.p_new;
            let pick = if rc.new_tried < rc.new.len() && (take_new || rc.old_tried >= rc.old.len()) {
                rc.new_tried += 1;
                Some(rc.new[rc.new_tried - 1].clone())
            } else if rc.old_tried < rc.old.len() {
                rc.old_tried += 1;
                Some(rc.old[rc.old_tried - 1].clone())
            } else {
                None
            };
            match pick {
                Some(hp) => {
                    self.current = self.servers.iter().position(|s| *s == hp);
                    return (hp, false);
                }
                None => {
                    // Tried every server of the new list: back to round robin.
                    self.reconfig = None;
                    back_off = true;
                }
            }
        }
        let i = match self.current {
            Some(c) if c + 1 < self.servers.len() => c + 1,
            _ => 0,
        };
        self.current = Some(i);
        back_off |= self.last == Some(i);
        if self.last.is_none() {
            self.last = Some(0);
        }
        (self.servers[i].clone(), back_off)
    }

    /// A connection to the server last returned by `next_server` succeeded.
    pub fn on_connected(&mut self) {
        self.last = self.current;
        self.reconfig = None;
    }

    /// Replaces the server list (seed 002's rebalancing). `connected` is the server of the
    /// current connection, if any. Returns true when the client must drop its connection and
    /// connect to a server chosen by the rebalancing rule:
    /// - its server is not in the new list: always;
    /// - the list grew from n to m servers and its server is still in it: with probability
    ///   1 - n/m, and then to one of the new servers;
    /// - the list kept its size or shrank and its server is in it: never.
    ///
    /// When the client must move, each attempt picks a new server with probability pNew
    /// (1 when the list grew; when it shrank, pOld = old·(n−m) / (m·(n−old)) and pNew = 1−pOld,
    /// where `old` of the m servers were in the previous list), until it has tried them all;
    /// then it goes back to round robin over the whole list.
    pub fn update(&mut self, servers: Vec<HostPort>, connected: Option<&HostPort>) -> bool {
        let mut shuffled = servers;
        self.rng.shuffle(&mut shuffled);
        let mine = match (&self.reconfig, connected) {
            (Some(_), _) => Some(self.next_server().0),
            (None, Some(c)) => Some(c.clone()),
            (None, None) => self.servers.get(self.last.unwrap_or(0)).cloned(),
        };
        let mine_in_new = mine.as_ref().is_some_and(|m| shuffled.contains(m));
        let (old, new): (Vec<HostPort>, Vec<HostPort>) =
            shuffled.iter().cloned().partition(|hp| self.servers.contains(hp));
        let n_prev = self.servers.len() as f64;
        let n_next = shuffled.len() as f64;
        let n_old = old.len() as f64;
        let p_new = if shuffled.len() > self.servers.len() {
            if !mine_in_new || self.rng.next_f64() <= 1.0 - n_prev / n_next {
                Some(1.0)
            } else {
                None
            }
        } else if mine_in_new {
            None
        } else {
            let p_old = (n_old * (n_prev - n_next)) / (n_next * (n_prev - n_old));
            Some(1.0 - p_old)
        };
        let moving = p_new.is_some();
        self.reconfig = p_new.map(|p_new| Reconfig { old, new, old_tried: 0, new_tried: 0, p_new });
        self.current = if moving { None } else { mine.and_then(|m| shuffled.iter().position(|s| *s == m)) };
        self.last = self.current;
        self.servers = shuffled;
        moving
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(names: &[&str]) -> Vec<HostPort> {
        names.iter().map(|n| HostPort { host: n.to_string(), port: 2181 }).collect()
    }

    #[test]
    fn shuffled_order_is_seeded_and_round_robin_backs_off_after_a_cycle() {
        let a = HostProvider::new(hosts(&["a", "b", "c", "d", "e"]), Rng::new(1));
        let b = HostProvider::new(hosts(&["a", "b", "c", "d", "e"]), Rng::new(1));
        assert_eq!(a.servers(), b.servers(), "same seed, same order");
        let orders: std::collections::HashSet<Vec<String>> = (0..20)
            .map(|s| HostProvider::new(hosts(&["a", "b", "c", "d", "e"]), Rng::new(s)))
            .map(|p| p.servers().iter().map(|h| h.host.clone()).collect())
            .collect();
        assert!(orders.len() > 5, "seeds give different orders: {orders:?}");

        let mut p = HostProvider::new(hosts(&["a", "b", "c"]), Rng::new(7));
        let order: Vec<HostPort> = p.servers().to_vec();
        let tries: Vec<(HostPort, bool)> = (0..7).map(|_| p.next_server()).collect();
        let expect_hosts: Vec<HostPort> = (0..7).map(|i| order[i % 3].clone()).collect();
        assert_eq!(tries.iter().map(|t| t.0.clone()).collect::<Vec<_>>(), expect_hosts);
        assert_eq!(tries.iter().map(|t| t.1).collect::<Vec<_>>(), vec![false, false, false, true, false, false, true]);
        // Connected to the second server: the cycle now ends when we come back to it.
        let mut p = HostProvider::new(hosts(&["a", "b", "c"]), Rng::new(7));
        p.next_server();
        p.next_server();
        p.on_connected();
        let backs: Vec<bool> = (0..3).map(|_| p.next_server().1).collect();
        assert_eq!(backs, vec![false, false, true]);
    }

    /// Fraction of `trials` clients connected to `current` that move after `update`.
    fn move_rate(prev: &[&str], next: &[&str], current: &str, trials: u64) -> f64 {
        let mut moved = 0;
        for seed in 0..trials {
            let mut p = HostProvider::new(hosts(prev), Rng::new(seed));
            let cur = HostPort { host: current.into(), port: 2181 };
            if p.update(hosts(next), Some(&cur)) {
                moved += 1;
            }
        }
        moved as f64 / trials as f64
    }

    #[test]
    fn growing_list_moves_one_minus_n_over_m_of_clients_to_new_servers() {
        // Seed 002's example: 3 hosts become 5; 40% of each old host's clients move.
        let rate = move_rate(&["a", "b", "c"], &["a", "b", "c", "d", "e"], "a", 20_000);
        assert!((rate - 0.4).abs() < 0.015, "rate {rate}");
        // And they move to one of the new hosts, chosen at random.
        let mut counts = std::collections::HashMap::new();
        for seed in 0..4_000 {
            let mut p = HostProvider::new(hosts(&["a", "b", "c"]), Rng::new(seed));
            let cur = HostPort { host: "a".into(), port: 2181 };
            if p.update(hosts(&["a", "b", "c", "d", "e"]), Some(&cur)) {
                *counts.entry(p.next_server().0.host).or_insert(0) += 1;
            }
        }
        assert_eq!(counts.keys().filter(|h| *h != "d" && *h != "e").count(), 0, "{counts:?}");
        let (d, e) = (counts["d"] as f64, counts["e"] as f64);
        assert!((d / (d + e) - 0.5).abs() < 0.05, "{counts:?}");
        // 2 -> 8 hosts: 75% move.
        let rate = move_rate(&["a", "b"], &["a", "b", "c", "d", "e", "f", "g", "h"], "b", 20_000);
        assert!((rate - 0.75).abs() < 0.015, "rate {rate}");
    }

    #[test]
    fn shrinking_list_moves_only_clients_of_removed_servers() {
        // Seed 002's second example: 5 hosts become 3.
        assert_eq!(move_rate(&["a", "b", "c", "d", "e"], &["a", "b", "c"], "a", 500), 0.0);
        assert_eq!(move_rate(&["a", "b", "c", "d", "e"], &["a", "b", "c"], "e", 500), 1.0);
        // The movers go to one of the 3 remaining hosts (pOld = 1), uniformly.
        let mut counts = std::collections::HashMap::new();
        for seed in 0..3_000 {
            let mut p = HostProvider::new(hosts(&["a", "b", "c", "d", "e"]), Rng::new(seed));
            let cur = HostPort { host: "d".into(), port: 2181 };
            assert!(p.update(hosts(&["a", "b", "c"]), Some(&cur)));
            *counts.entry(p.next_server().0.host).or_insert(0) += 1;
        }
        assert_eq!(counts.len(), 3, "{counts:?}");
        for c in counts.values() {
            assert!((*c as f64 / 3000.0 - 1.0 / 3.0).abs() < 0.04, "{counts:?}");
        }
    }

    #[test]
    fn shrinking_with_new_servers_uses_p_old() {
        // 4 hosts {a,b,c,d} become {a,b,x}: old = 2, n = 4, m = 3:
        // pOld = 2·(4−3) / (3·(4−2)) = 1/3, so a mover picks the new host x with p = 2/3 first.
        let mut to_x = 0;
        let trials = 9_000;
        for seed in 0..trials {
            let mut p = HostProvider::new(hosts(&["a", "b", "c", "d"]), Rng::new(seed));
            let cur = HostPort { host: "d".into(), port: 2181 };
            assert!(p.update(hosts(&["a", "b", "x"]), Some(&cur)));
            if p.next_server().0.host == "x" {
                to_x += 1;
            }
        }
        let rate = to_x as f64 / trials as f64;
        assert!((rate - 2.0 / 3.0).abs() < 0.02, "rate {rate}");
    }

    #[test]
    fn after_trying_every_new_server_it_returns_to_round_robin() {
        let mut p = HostProvider::new(hosts(&["a"]), Rng::new(3));
        let cur = HostPort { host: "a".into(), port: 2181 };
        // Not in the new list: always moves; tries x, y (new) in some order, then round robin.
        assert!(p.update(hosts(&["x", "y"]), Some(&cur)));
        let first: Vec<String> = (0..2).map(|_| p.next_server().0.host).collect();
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, vec!["x", "y"]);
        assert!(p.rebalancing());
        let (_, back_off) = p.next_server();
        assert!(back_off, "every server of the new list failed: wait before the next cycle");
        assert!(!p.rebalancing());
        // Same seed, same choices.
        let mut q = HostProvider::new(hosts(&["a"]), Rng::new(3));
        q.update(hosts(&["x", "y"]), Some(&cur));
        assert_eq!((0..2).map(|_| q.next_server().0.host).collect::<Vec<_>>(), first);
    }

    #[test]
    fn unchanged_list_keeps_the_connection() {
        let mut p = HostProvider::new(hosts(&["a", "b", "c"]), Rng::new(11));
        let (hp, _) = p.next_server();
        p.on_connected();
        assert!(!p.update(hosts(&["c", "b", "a"]), Some(&hp)));
        assert!(!p.rebalancing());
    }
}
