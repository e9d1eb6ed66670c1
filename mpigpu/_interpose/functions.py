"""The MPI functions the interposer (pmpi/) defines: one table, read by pmpi/generate.py at build time (the
C wrappers, their argument lists and the staging descriptors) and by the Python handler at run time.

Each entry is the function's name without `MPI_` and its parameters in C order, `name:kind`:
- `int`, `count` (an MPI_Count), `aint` (an MPI_Aint: a target displacement), `win` (a window), `ints` (an int array), `counts` (an MPI_Count array), `aints` (an MPI_Aint array), `intp` (an int the call
  reads and writes: Pack's position), `countp` (an MPI_Count it reads and writes: Pack_c's position), `type`, `types` (an array of datatypes), `op`, `comm`, `info`, `request` (MPI_Request *), `status`
  (MPI_Status *), `message` (MPI_Message *: a matched probe's message, which its receive sets to
  MPI_MESSAGE_NULL): passed through; handles travel as pointer-sized words, so the one library serves MPIs whose
  handles are ints (MPICH) or pointers (Open MPI);
- a buffer, `in`, `out` or `inout`, with where its bytes lie in brackets, `[count,type]` over the
  function's other parameters:
    `c,t`       c elements of type t
    `1,t`       one element of type t (the atomic one-sided calls)
    `c*n,t`     c elements for each rank of the group
    `cs/ds,t`   cs[i] elements at displacement ds[i] elements, for each rank i (the v-forms)
    `cs/ds,ts`  cs[i] elements of ts[i] at ds[i] bytes (the w-forms)
    `cs+,t`     the sum of cs[i] elements
    `cs.,t`     cs[rank] elements
    `c`         c bytes (MPI_PACKED: Pack's and Unpack's packed side)
    `c*p,t`     c elements for each of p (another parameter: the partitions of a partitioned call)
  `a|b`: form b where the call is in place (sendbuf is MPI_IN_PLACE); `@root`: read only at the root.
  The group a count is for: the communicator's (remote) size `n`, or, for the neighbourhood collectives,
  the topology's in- or out-degree: `c*in`, `c*out`, `cs/ds@in`, `cs/ds@out`.
A buffer is where device pointers may appear; the others never hold one. LOCAL: the functions that
communicate with no other rank (nothing to agree on: their host buffers go straight to the library).
"""

FUNCTIONS = (
    # point to point, blocking
    ('Send', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm'),
    ('Bsend', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm'),
    ('Ssend', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm'),
    ('Rsend', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm'),
    ('Recv', 'buf:out[count,datatype] count:int datatype:type source:int tag:int comm:comm status:status'),
    ('Mrecv', 'buf:out[count,datatype] count:int datatype:type message:message status:status'),
    ('Sendrecv', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type dest:int sendtag:int '
                 'recvbuf:out[recvcount,recvtype] recvcount:int recvtype:type source:int recvtag:int '
                 'comm:comm status:status'),
    ('Sendrecv_replace', 'buf:inout[count,datatype] count:int datatype:type dest:int sendtag:int source:int '
                         'recvtag:int comm:comm status:status'),
    # collectives, blocking
    ('Bcast', 'buffer:inout[count,datatype] count:int datatype:type root:int comm:comm'),
    ('Reduce', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype]@root count:int datatype:type op:op '
               'root:int comm:comm'),
    ('Allreduce', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype] count:int datatype:type op:op comm:comm'),
    ('Reduce_scatter_block', 'sendbuf:in[recvcount*n,datatype] recvbuf:out[recvcount,datatype|recvcount*n,datatype] '
                             'recvcount:int datatype:type op:op comm:comm'),
    ('Reduce_scatter', 'sendbuf:in[recvcounts+,datatype] recvbuf:out[recvcounts.,datatype|recvcounts+,datatype] '
                       'recvcounts:ints datatype:type op:op comm:comm'),
    ('Scan', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype] count:int datatype:type op:op comm:comm'),
    ('Exscan', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype] count:int datatype:type op:op comm:comm'),
    ('Allgather', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type recvbuf:out[recvcount*n,recvtype] '
                  'recvcount:int recvtype:type comm:comm'),
    ('Allgatherv', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                   'recvbuf:out[recvcounts/displs,recvtype] recvcounts:ints displs:ints recvtype:type comm:comm'),
    ('Gather', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type recvbuf:out[recvcount*n,recvtype]@root '
               'recvcount:int recvtype:type root:int comm:comm'),
    ('Gatherv', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                'recvbuf:out[recvcounts/displs,recvtype]@root recvcounts:ints displs:ints recvtype:type root:int '
                'comm:comm'),
    ('Scatter', 'sendbuf:in[sendcount*n,sendtype]@root sendcount:int sendtype:type recvbuf:out[recvcount,recvtype] '
                'recvcount:int recvtype:type root:int comm:comm'),
    ('Scatterv', 'sendbuf:in[sendcounts/displs,sendtype]@root sendcounts:ints displs:ints sendtype:type '
                 'recvbuf:out[recvcount,recvtype] recvcount:int recvtype:type root:int comm:comm'),
    ('Alltoall', 'sendbuf:in[sendcount*n,sendtype] sendcount:int sendtype:type recvbuf:out[recvcount*n,recvtype] '
                 'recvcount:int recvtype:type comm:comm'),
    ('Alltoallv', 'sendbuf:in[sendcounts/sdispls,sendtype] sendcounts:ints sdispls:ints sendtype:type '
                  'recvbuf:out[recvcounts/rdispls,recvtype] recvcounts:ints rdispls:ints recvtype:type comm:comm'),
    ('Alltoallw', 'sendbuf:in[sendcounts/sdispls,sendtypes] sendcounts:ints sdispls:ints sendtypes:types '
                  'recvbuf:out[recvcounts/rdispls,recvtypes] recvcounts:ints rdispls:ints recvtypes:types comm:comm'),
    # point to point, non-blocking
    ('Isend', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm request:request'),
    ('Ibsend', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm request:request'),
    ('Issend', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm request:request'),
    ('Irsend', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm request:request'),
    ('Irecv', 'buf:out[count,datatype] count:int datatype:type source:int tag:int comm:comm request:request'),
    ('Imrecv', 'buf:out[count,datatype] count:int datatype:type message:message request:request'),
    # collectives, non-blocking
    ('Ibcast', 'buffer:inout[count,datatype] count:int datatype:type root:int comm:comm request:request'),
    ('Ireduce', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype]@root count:int datatype:type op:op '
                'root:int comm:comm request:request'),
    ('Iallreduce', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype] count:int datatype:type op:op comm:comm '
                   'request:request'),
    ('Ireduce_scatter_block', 'sendbuf:in[recvcount*n,datatype] '
                              'recvbuf:out[recvcount,datatype|recvcount*n,datatype] recvcount:int datatype:type op:op '
                              'comm:comm request:request'),
    ('Iallgather', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type recvbuf:out[recvcount*n,recvtype] '
                   'recvcount:int recvtype:type comm:comm request:request'),
    ('Ialltoall', 'sendbuf:in[sendcount*n,sendtype] sendcount:int sendtype:type recvbuf:out[recvcount*n,recvtype] '
                  'recvcount:int recvtype:type comm:comm request:request'),
    ('Ireduce_scatter', 'sendbuf:in[recvcounts+,datatype] recvbuf:out[recvcounts.,datatype|recvcounts+,datatype] '
                        'recvcounts:ints datatype:type op:op comm:comm request:request'),
    ('Iscan', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype] count:int datatype:type op:op comm:comm '
              'request:request'),
    ('Iexscan', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype] count:int datatype:type op:op comm:comm '
                'request:request'),
    ('Iallgatherv', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                    'recvbuf:out[recvcounts/displs,recvtype] recvcounts:ints displs:ints recvtype:type comm:comm '
                    'request:request'),
    ('Igather', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type recvbuf:out[recvcount*n,recvtype]@root '
                'recvcount:int recvtype:type root:int comm:comm request:request'),
    ('Igatherv', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                 'recvbuf:out[recvcounts/displs,recvtype]@root recvcounts:ints displs:ints recvtype:type root:int '
                 'comm:comm request:request'),
    ('Iscatter', 'sendbuf:in[sendcount*n,sendtype]@root sendcount:int sendtype:type recvbuf:out[recvcount,recvtype] '
                 'recvcount:int recvtype:type root:int comm:comm request:request'),
    ('Iscatterv', 'sendbuf:in[sendcounts/displs,sendtype]@root sendcounts:ints displs:ints sendtype:type '
                  'recvbuf:out[recvcount,recvtype] recvcount:int recvtype:type root:int comm:comm request:request'),
    ('Ialltoallv', 'sendbuf:in[sendcounts/sdispls,sendtype] sendcounts:ints sdispls:ints sendtype:type '
                   'recvbuf:out[recvcounts/rdispls,recvtype] recvcounts:ints rdispls:ints recvtype:type comm:comm '
                   'request:request'),
    ('Ialltoallw', 'sendbuf:in[sendcounts/sdispls,sendtypes] sendcounts:ints sdispls:ints sendtypes:types '
                   'recvbuf:out[recvcounts/rdispls,recvtypes] recvcounts:ints rdispls:ints recvtypes:types comm:comm '
                   'request:request'),
    # neighbourhood collectives (the handler's: their degrees come from the topology)
    ('Neighbor_allgather', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                           'recvbuf:out[recvcount*in,recvtype] recvcount:int recvtype:type comm:comm'),
    ('Neighbor_allgatherv', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                            'recvbuf:out[recvcounts/displs@in,recvtype] recvcounts:ints displs:ints recvtype:type '
                            'comm:comm'),
    ('Neighbor_alltoall', 'sendbuf:in[sendcount*out,sendtype] sendcount:int sendtype:type '
                          'recvbuf:out[recvcount*in,recvtype] recvcount:int recvtype:type comm:comm'),
    ('Neighbor_alltoallv', 'sendbuf:in[sendcounts/sdispls@out,sendtype] sendcounts:ints sdispls:ints sendtype:type '
                           'recvbuf:out[recvcounts/rdispls@in,recvtype] recvcounts:ints rdispls:ints recvtype:type '
                           'comm:comm'),
    ('Neighbor_alltoallw', 'sendbuf:in[sendcounts/sdispls@out,sendtypes] sendcounts:ints sdispls:aints '
                           'sendtypes:types recvbuf:out[recvcounts/rdispls@in,recvtypes] recvcounts:ints '
                           'rdispls:aints recvtypes:types comm:comm'),
    ('Ineighbor_allgather', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                            'recvbuf:out[recvcount*in,recvtype] recvcount:int recvtype:type comm:comm request:request'),
    ('Ineighbor_allgatherv', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                             'recvbuf:out[recvcounts/displs@in,recvtype] recvcounts:ints displs:ints recvtype:type '
                             'comm:comm request:request'),
    ('Ineighbor_alltoall', 'sendbuf:in[sendcount*out,sendtype] sendcount:int sendtype:type '
                           'recvbuf:out[recvcount*in,recvtype] recvcount:int recvtype:type comm:comm request:request'),
    ('Ineighbor_alltoallv', 'sendbuf:in[sendcounts/sdispls@out,sendtype] sendcounts:ints sdispls:ints '
                            'sendtype:type recvbuf:out[recvcounts/rdispls@in,recvtype] recvcounts:ints rdispls:ints '
                            'recvtype:type comm:comm request:request'),
    ('Ineighbor_alltoallw', 'sendbuf:in[sendcounts/sdispls@out,sendtypes] sendcounts:ints sdispls:aints '
                            'sendtypes:types recvbuf:out[recvcounts/rdispls@in,recvtypes] recvcounts:ints '
                            'rdispls:aints recvtypes:types comm:comm request:request'),
    # persistent: mpigpu's persistent request behind a request of the library's that stands for it (a proxy),
    # which the calls of REQUEST_CALLS below start, complete and free (the info hints are not read)
    ('Send_init', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm request:request'),
    ('Bsend_init', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm request:request'),
    ('Ssend_init', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm request:request'),
    ('Rsend_init', 'buf:in[count,datatype] count:int datatype:type dest:int tag:int comm:comm request:request'),
    ('Recv_init', 'buf:out[count,datatype] count:int datatype:type source:int tag:int comm:comm request:request'),
    ('Bcast_init', 'buffer:inout[count,datatype] count:int datatype:type root:int comm:comm info:info '
                   'request:request'),
    ('Reduce_init', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype]@root count:int datatype:type op:op '
                    'root:int comm:comm info:info request:request'),
    ('Allreduce_init', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype] count:int datatype:type op:op '
                       'comm:comm info:info request:request'),
    ('Reduce_scatter_block_init', 'sendbuf:in[recvcount*n,datatype] '
                                  'recvbuf:out[recvcount,datatype|recvcount*n,datatype] recvcount:int '
                                  'datatype:type op:op comm:comm info:info request:request'),
    ('Allgather_init', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                       'recvbuf:out[recvcount*n,recvtype] recvcount:int recvtype:type comm:comm info:info '
                       'request:request'),
    ('Allgatherv_init', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                        'recvbuf:out[recvcounts/displs,recvtype] recvcounts:ints displs:ints recvtype:type '
                        'comm:comm info:info request:request'),
    ('Gather_init', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                    'recvbuf:out[recvcount*n,recvtype]@root recvcount:int recvtype:type root:int comm:comm '
                    'info:info request:request'),
    ('Scatter_init', 'sendbuf:in[sendcount*n,sendtype]@root sendcount:int sendtype:type '
                     'recvbuf:out[recvcount,recvtype] recvcount:int recvtype:type root:int comm:comm info:info '
                     'request:request'),
    ('Alltoall_init', 'sendbuf:in[sendcount*n,sendtype] sendcount:int sendtype:type '
                      'recvbuf:out[recvcount*n,recvtype] recvcount:int recvtype:type comm:comm info:info '
                      'request:request'),
    ('Alltoallv_init', 'sendbuf:in[sendcounts/sdispls,sendtype] sendcounts:ints sdispls:ints sendtype:type '
                       'recvbuf:out[recvcounts/rdispls,recvtype] recvcounts:ints rdispls:ints recvtype:type '
                       'comm:comm info:info request:request'),
    ('Reduce_scatter_init', 'sendbuf:in[recvcounts+,datatype] '
                            'recvbuf:out[recvcounts.,datatype|recvcounts+,datatype] recvcounts:ints datatype:type '
                            'op:op comm:comm info:info request:request'),
    ('Gatherv_init', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                     'recvbuf:out[recvcounts/displs,recvtype]@root recvcounts:ints displs:ints recvtype:type '
                     'root:int comm:comm info:info request:request'),
    ('Scatterv_init', 'sendbuf:in[sendcounts/displs,sendtype]@root sendcounts:ints displs:ints sendtype:type '
                      'recvbuf:out[recvcount,recvtype] recvcount:int recvtype:type root:int comm:comm info:info '
                      'request:request'),
    ('Alltoallw_init', 'sendbuf:in[sendcounts/sdispls,sendtypes] sendcounts:ints sdispls:ints sendtypes:types '
                       'recvbuf:out[recvcounts/rdispls,recvtypes] recvcounts:ints rdispls:ints recvtypes:types '
                       'comm:comm info:info request:request'),
    ('Neighbor_allgather_init', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                                'recvbuf:out[recvcount*in,recvtype] recvcount:int recvtype:type comm:comm '
                                'info:info request:request'),
    ('Neighbor_allgatherv_init', 'sendbuf:in[sendcount,sendtype] sendcount:int sendtype:type '
                                 'recvbuf:out[recvcounts/displs@in,recvtype] recvcounts:ints displs:ints '
                                 'recvtype:type comm:comm info:info request:request'),
    ('Neighbor_alltoall_init', 'sendbuf:in[sendcount*out,sendtype] sendcount:int sendtype:type '
                               'recvbuf:out[recvcount*in,recvtype] recvcount:int recvtype:type comm:comm info:info '
                               'request:request'),
    ('Neighbor_alltoallv_init', 'sendbuf:in[sendcounts/sdispls@out,sendtype] sendcounts:ints sdispls:ints '
                                'sendtype:type recvbuf:out[recvcounts/rdispls@in,recvtype] recvcounts:ints '
                                'rdispls:ints recvtype:type comm:comm info:info request:request'),
    ('Neighbor_alltoallw_init', 'sendbuf:in[sendcounts/sdispls@out,sendtypes] sendcounts:ints sdispls:aints '
                                'sendtypes:types recvbuf:out[recvcounts/rdispls@in,recvtypes] recvcounts:ints '
                                'rdispls:aints recvtypes:types comm:comm info:info request:request'),
    ('Scan_init', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype] count:int datatype:type op:op comm:comm '
                  'info:info request:request'),
    ('Exscan_init', 'sendbuf:in[count,datatype] recvbuf:out[count,datatype] count:int datatype:type op:op '
                    'comm:comm info:info request:request'),
    # partitioned (MPI-4): mpigpu's partitioned request behind a proxy, as the persistent calls above
    ('Psend_init', 'buf:in[count*partitions,datatype] partitions:int count:count datatype:type dest:int tag:int '
                   'comm:comm info:info request:request'),
    ('Precv_init', 'buf:out[count*partitions,datatype] partitions:int count:count datatype:type source:int '
                   'tag:int comm:comm info:info request:request'),
    # one-sided (RMA) operations: an origin buffer MPI may use until the epoch's synchronization, so
    # mpigpu's Win keeps a device buffer's host copy until then (Put, Accumulate: copied in at the call;
    # Get, Get_accumulate's result: copied back at the synchronization). The window's own memory is host
    # memory (MPI_Win_allocate gives such; mpigpu refuses device memory as window memory).
    ('Put', 'origin_addr:in[origin_count,origin_datatype] origin_count:int origin_datatype:type target_rank:int '
            'target_disp:aint target_count:int target_datatype:type win:win'),
    ('Get', 'origin_addr:out[origin_count,origin_datatype] origin_count:int origin_datatype:type target_rank:int '
            'target_disp:aint target_count:int target_datatype:type win:win'),
    ('Accumulate', 'origin_addr:in[origin_count,origin_datatype] origin_count:int origin_datatype:type '
                   'target_rank:int target_disp:aint target_count:int target_datatype:type op:op win:win'),
    ('Get_accumulate', 'origin_addr:in[origin_count,origin_datatype] origin_count:int origin_datatype:type '
                       'result_addr:out[result_count,result_datatype] result_count:int result_datatype:type '
                       'target_rank:int target_disp:aint target_count:int target_datatype:type op:op win:win'),
    # their large-count forms, written out: the target's count is an MPI_Count too, which no buffer's span
    # reads (large_count_form widens only those); the method without `_c` runs them
    ('Put_c', 'origin_addr:in[origin_count,origin_datatype] origin_count:count origin_datatype:type '
              'target_rank:int target_disp:aint target_count:count target_datatype:type win:win'),
    ('Get_c', 'origin_addr:out[origin_count,origin_datatype] origin_count:count origin_datatype:type '
              'target_rank:int target_disp:aint target_count:count target_datatype:type win:win'),
    ('Accumulate_c', 'origin_addr:in[origin_count,origin_datatype] origin_count:count origin_datatype:type '
                     'target_rank:int target_disp:aint target_count:count target_datatype:type op:op win:win'),
    ('Get_accumulate_c', 'origin_addr:in[origin_count,origin_datatype] origin_count:count origin_datatype:type '
                         'result_addr:out[result_count,result_datatype] result_count:count '
                         'result_datatype:type target_rank:int target_disp:aint target_count:count '
                         'target_datatype:type op:op win:win'),
    # the request-based forms: mpigpu's request (a generalized request, completed once the operation is and,
    # for a Get, its result copied back) written to the caller's, which the library's MPI_Wait & co. complete
    ('Rput', 'origin_addr:in[origin_count,origin_datatype] origin_count:int origin_datatype:type target_rank:int '
             'target_disp:aint target_count:int target_datatype:type win:win request:request'),
    ('Rget', 'origin_addr:out[origin_count,origin_datatype] origin_count:int origin_datatype:type target_rank:int '
             'target_disp:aint target_count:int target_datatype:type win:win request:request'),
    ('Raccumulate', 'origin_addr:in[origin_count,origin_datatype] origin_count:int origin_datatype:type '
                    'target_rank:int target_disp:aint target_count:int target_datatype:type op:op win:win '
                    'request:request'),
    ('Rget_accumulate', 'origin_addr:in[origin_count,origin_datatype] origin_count:int origin_datatype:type '
                        'result_addr:out[result_count,result_datatype] result_count:int result_datatype:type '
                        'target_rank:int target_disp:aint target_count:int target_datatype:type op:op win:win '
                        'request:request'),
    ('Rput_c', 'origin_addr:in[origin_count,origin_datatype] origin_count:count origin_datatype:type '
               'target_rank:int target_disp:aint target_count:count target_datatype:type win:win request:request'),
    ('Rget_c', 'origin_addr:out[origin_count,origin_datatype] origin_count:count origin_datatype:type '
               'target_rank:int target_disp:aint target_count:count target_datatype:type win:win request:request'),
    ('Raccumulate_c', 'origin_addr:in[origin_count,origin_datatype] origin_count:count origin_datatype:type '
                      'target_rank:int target_disp:aint target_count:count target_datatype:type op:op win:win '
                      'request:request'),
    ('Rget_accumulate_c', 'origin_addr:in[origin_count,origin_datatype] origin_count:count origin_datatype:type '
                          'result_addr:out[result_count,result_datatype] result_count:count '
                          'result_datatype:type target_rank:int target_disp:aint target_count:count '
                          'target_datatype:type op:op win:win request:request'),
    # the atomic forms: one element each (a count of 1, `1,t`)
    ('Fetch_and_op', 'origin_addr:in[1,datatype] result_addr:out[1,datatype] datatype:type target_rank:int '
                     'target_disp:aint op:op win:win'),
    ('Compare_and_swap', 'origin_addr:in[1,datatype] compare_addr:in[1,datatype] result_addr:out[1,datatype] '
                         'datatype:type target_rank:int target_disp:aint win:win'),
    # the synchronizations that complete a rank's RMA operations (all of them, or those towards one target
    # rank): no buffers; the handler copies back what completed operations wrote into host copies
    ('Win_fence', 'assertion:int win:win'),
    ('Win_complete', 'win:win'),
    ('Win_unlock', 'rank:int win:win'),
    ('Win_unlock_all', 'win:win'),
    ('Win_flush', 'rank:int win:win'),
    ('Win_flush_all', 'win:win'),
    ('Win_flush_local', 'rank:int win:win'),
    ('Win_flush_local_all', 'win:win'),
    # no communication
    ('Reduce_local', 'inbuf:in[count,datatype] inoutbuf:inout[count,datatype] count:int datatype:type op:op'),
    ('Pack', 'inbuf:in[incount,datatype] incount:int datatype:type outbuf:out[outsize] outsize:int '
             'position:intp comm:comm'),
    ('Unpack', 'inbuf:in[insize] insize:int position:intp outbuf:out[outcount,datatype] outcount:int '
               'datatype:type comm:comm'),
)
LOCAL = ('Reduce_local', 'Pack', 'Unpack')

# MPI-4's large-count forms (MPI_<name>_c: MPI_Count counts, MPI_Aint displacements), derived from their
# int forms above (large_count_form); the method without `_c` runs them (mpi4py counts elements itself).
# Pack_c and Unpack_c read and write an MPI_Count position (`countp`); the neighbourhood v- and w-forms'
# arrays are as long as the topology's in- or out-degree. On a library without `_c` functions the
# non-blocking and persistent forms' arrays, which the library reads until the request completes (or is
# freed), are narrowed into the caller's own arrays, as mpi4py's fallback does (pmpi/narrow.c).
LARGE_COUNT = (
    'Send', 'Bsend', 'Ssend', 'Rsend', 'Recv', 'Mrecv', 'Sendrecv', 'Sendrecv_replace',
    'Isend', 'Ibsend', 'Issend', 'Irsend', 'Irecv', 'Imrecv',
    'Bcast', 'Reduce', 'Allreduce', 'Reduce_scatter_block', 'Reduce_scatter', 'Scan', 'Exscan', 'Allgather',
    'Allgatherv', 'Gather', 'Gatherv', 'Scatter', 'Scatterv', 'Alltoall', 'Alltoallv', 'Alltoallw',
    'Ibcast', 'Ireduce', 'Iallreduce', 'Ireduce_scatter_block', 'Iallgather', 'Ialltoall', 'Iscan', 'Iexscan',
    'Igather', 'Iscatter',
    'Neighbor_allgather', 'Neighbor_alltoall', 'Ineighbor_allgather', 'Ineighbor_alltoall',
    'Neighbor_allgatherv', 'Neighbor_alltoallv', 'Neighbor_alltoallw',
    'Iallgatherv', 'Ialltoallv', 'Ialltoallw', 'Igatherv', 'Iscatterv', 'Ireduce_scatter',
    'Ineighbor_allgatherv', 'Ineighbor_alltoallv', 'Ineighbor_alltoallw',
    'Send_init', 'Bsend_init', 'Ssend_init', 'Rsend_init', 'Recv_init', 'Bcast_init', 'Reduce_init',
    'Allreduce_init', 'Reduce_scatter_block_init', 'Allgather_init', 'Gather_init', 'Scatter_init',
    'Alltoall_init', 'Scan_init', 'Exscan_init', 'Neighbor_allgather_init', 'Neighbor_alltoall_init',
    'Allgatherv_init', 'Alltoallv_init', 'Alltoallw_init', 'Gatherv_init', 'Scatterv_init', 'Reduce_scatter_init',
    'Neighbor_allgatherv_init', 'Neighbor_alltoallv_init', 'Neighbor_alltoallw_init',
    'Reduce_local', 'Pack', 'Unpack',
)
_WIDER = {'int': 'count', 'ints': 'counts'}  # a count's kind in the large-count form (displacements: aints)
_WIDER_POINTER = {'intp': 'countp'}  # Pack's position, read and written, an MPI_Count in Pack_c

# The calls that start, complete or free requests: no buffers. The interposer hands one to the handler
# only where a request it names is a proxy of FUNCTIONS' persistent calls (requests: an array of `count`
# requests; reqval: a request passed by value); any other goes straight to the library.
REQUEST_CALLS = (
    ('Start', 'request:request'),
    ('Startall', 'count:int requests:requests'),
    ('Wait', 'request:request status:status'),
    ('Test', 'request:request flag:intp status:status'),
    ('Waitall', 'count:int requests:requests statuses:status'),
    ('Testall', 'count:int requests:requests flag:intp statuses:status'),
    ('Waitany', 'count:int requests:requests index:intp status:status'),
    ('Testany', 'count:int requests:requests index:intp flag:intp status:status'),
    ('Waitsome', 'count:int requests:requests outcount:intp indices:intp statuses:status'),
    ('Testsome', 'count:int requests:requests outcount:intp indices:intp statuses:status'),
    ('Request_free', 'request:request'),
    ('Cancel', 'request:request'),
    ('Request_get_status', 'request:reqval flag:intp status:status'),
    ('Request_get_status_any', 'count:int requests:requests index:intp flag:intp status:status'),
    ('Request_get_status_all', 'count:int requests:requests flag:intp statuses:status'),
    ('Request_get_status_some', 'count:int requests:requests outcount:intp indices:intp statuses:status'),
    ('Pready', 'partition:int request:reqval'),
    ('Pready_range', 'partition_low:int partition_high:int request:reqval'),
    ('Pready_list', 'length:int array_of_partitions:ints request:reqval'),
    ('Parrived', 'request:reqval partition:int flag:intp'),
)

KINDS = ('int', 'count', 'ints', 'counts', 'aint', 'aints', 'intp', 'countp', 'type', 'types', 'op', 'comm', 'win', 'info',
         'request', 'requests', 'reqval', 'status', 'message')
DIRECTIONS = ('in', 'out', 'inout')


class Param:
    """One parameter: its name, kind, and for a buffer its direction, forms (plain, in place) and root flag."""

    def __init__(self, text):
        name, _, rest = text.partition(':')
        self.name = name
        self.root_only = rest.endswith('@root')
        rest = rest.removesuffix('@root')
        kind, _, span = rest.partition('[')
        self.kind = kind
        self.forms = tuple(Span(f) for f in span.rstrip(']').split('|')) if span else ()
        if kind not in KINDS + DIRECTIONS or (kind in DIRECTIONS) != bool(self.forms):
            raise ValueError(f'parameter {text!r}: unknown kind or a buffer without its extent')
        self.is_buffer = kind in DIRECTIONS


class Span:
    """Where a buffer's bytes lie: `form` one of simple, times_n, times_p, v, w, sum, own, bytes, one (count
    None); the count,
    displacements and type parameters it reads (type None: bytes), the parameter its count is multiplied
    by (times_p's `factor`); the group its counts are for (`group`: n, in, out)."""

    def __init__(self, text):
        count, comma, self.type = text.partition(',')
        self.displs = self.factor = None
        self.group = 'n'
        if not comma:
            self.type, self.form = None, 'bytes'
        elif '/' in count:
            count, self.displs = count.split('/')
            self.displs, _, group = self.displs.partition('@')
            self.group = group or 'n'
            self.form = 'v'
        elif count.endswith(('*n', '*in', '*out')):
            count, self.group = count.rsplit('*', 1)
            self.form = 'times_n'
        elif '*' in count:
            count, self.factor = count.split('*')
            self.form = 'times_p'
        elif count == '1':
            count, self.form = None, 'one'
        elif count.endswith('+'):
            count, self.form = count[:-1], 'sum'
        elif count.endswith('.'):
            count, self.form = count[:-1], 'own'
        else:
            self.form = 'simple'
        self.count = count


FORMS = ('simple', 'times_n', 'v', 'w', 'sum', 'own', 'bytes', 'times_p', 'one')
GROUPS = ('n', 'in', 'out')


class Function:
    """One function of the table, with what its callers look up made once: the indices of its
    communicator, root, request and status (-1: none), its buffers' indices (in the order of the C
    wrapper's mask bits), and the parameters its buffers' specifications take in."""

    def __init__(self, name, signature):
        self.name = name
        self.params = tuple(Param(p) for p in signature.split())
        self.index = {p.name: i for i, p in enumerate(self.params)}
        for p in self.params:
            for s in p.forms:
                if s.form == 'v' and self.params[self.index[s.type]].kind == 'types':
                    s.form = 'w'
                for ref in tuple(r for r in (s.count, s.type, s.displs, s.factor) if r):
                    if ref not in self.index:
                        raise ValueError(f'MPI_{name}: {p.name} refers to unknown parameter {ref!r}')
        self.comm, self.request, self.status = self.find('comm'), self.find('request'), self.find('status')
        self.win = self.find('win')  # a one-sided call's window (-1: none)
        self.root = self.index.get('root', -1)
        self.local = name.removesuffix('_c') in LOCAL
        # makes a persistent request (started by MPI_Start): 1, or 2 where it is a partitioned one (MPI_Pready)
        self.persistent = (2 if name.startswith(('Psend', 'Precv')) else 1) if name.removesuffix('_c').endswith('_init') else 0
        self.method = name.removesuffix('_c')  # the mpi4py method that runs it (a large-count form: its own)
        self.buffers = tuple(i for i, p in enumerate(self.params) if p.is_buffer)
        self.folded = set()
        for p in self.params:
            for s in p.forms:
                self.folded.update((s.type, s.displs) if s.form in ('sum', 'own') else (s.count, s.type, s.displs))
        self.folded.discard(None)

    def find(self, kind):
        """Index of the first parameter of this kind, or -1."""
        return next((i for i, p in enumerate(self.params) if p.kind == kind), -1)


def large_count_form(name, signature):
    """(name_c, its signature): the counts its buffers read made MPI_Count, their displacements MPI_Aint."""
    base = Function(name, signature)
    counts = {s.count for p in base.params for s in p.forms}
    displs = {s.displs for p in base.params for s in p.forms if s.displs}
    words = []
    for p, word in zip(base.params, signature.split()):
        kind = p.kind
        wide = ('aints' if p.name in displs else _WIDER.get(kind, kind) if p.name in counts
                else _WIDER_POINTER.get(kind, kind))
        words.append(word.replace(f'{p.name}:{kind}', f'{p.name}:{wide}', 1))
    return name + '_c', ' '.join(words)


_SIGNATURES = dict(FUNCTIONS)
TABLE = tuple(Function(name, sig) for name, sig in FUNCTIONS + tuple(large_count_form(n, _SIGNATURES[n]) for n in LARGE_COUNT))
REQUEST_TABLE = tuple(Function(name, sig) for name, sig in REQUEST_CALLS)
