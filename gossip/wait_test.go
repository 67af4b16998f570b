package gossip

// How the tests wait. Every condition a test needs is waited for with
// wait.For (testenv/wait, the tree's one helper), never with a sleep of a
// guessed length, and its deadline is generous (a machine at load 6 on 2
// CPUs under -race must meet it): a test asserts what happens, not how
// fast. In a testing/synctest bubble (the clusters on memnet) the clock is
// virtual: the deadline and the polls take no real time, and the wait is
// as long as the cluster needs in its own time.
