"""Mode mpc3: comparison and classification inside semi-honest three-party computation (pure).

Replicated boolean sharing (Araki, Furukawa, Lindell, Nof, Ohara, CCS 2016; the binary part of
ABY3), bit-sliced over candidate sets. Modules: ``inputs`` (what data parties share), ``keys``
(per-run PRF keys, zero shares), ``threshold`` (the exact integer Dice test), ``candidates``
(candidate sets), ``gates`` (AND/open rounds, adder trees), ``flight`` (batches whose rounds
interleave, and where they run), ``compute`` (the compute party),
``driver`` (all parties in one process), ``pairs`` (target "any": the pairwise circuit). No grpc, no proto, no files.

Changes to the API contract of /work/briefs/mpc-core.md (also in /work/briefs/mpc-contract-changes.md):

1. ``InputShare.counts`` holds shares of each record's *count term* -N * x_j mod 2^w (at data
   party 0 2^(w-2) less when its x_0 = 0) as (n,) uint64 with w-bit values (N, w from
   ``threshold.threshold_test(P, l, s_t)``), not of x_j itself; ``validate_input_share`` gains ``count_bits: int | None`` (= w) and
   ComputeParty checks it. Serialise counts as uint64.
2. The batch size is a function of (P, l) only (``compute.batch_sets_for``), so the three compute
   parties cut identical batches whatever their memory budgets; ``memory_budget_bytes`` only refuses
   (``MemoryBudgetError``) a run whose candidate list and batch do not fit. ``ComputeParty`` gains
   ``batch_sets`` (tests; must be equal at the three CPs).
3. Rounds are numbered from 0 within each batch; every batch of a run has the same number of
   rounds (38 at P = 3, l = 1024); the last round of a batch (opening c and S of its matched sets) may have an empty
   payload. ``Round`` is defined in ``gates`` and re-exported by ``compute``.
4. ``run_mpc3_in_process(tables, params, *, progress=None, cancel=None, batch_sets=None)``;
   ``progress(cp, done_sets, total_sets)``; the returned ``InProcessRun.mpc_stats`` lists the three
   compute parties' ``MpcStats``.
5. Errors are ``errors.MpcError`` (a ProtocolError), ``errors.MpcCancelled`` when ``cancel`` is set.
6. In mode mpc3 ``l % P == 0`` is not required (no segments are cut).
"""
