// Where the P x D grid's ranks sit on hosts: which consecutive launch ranks (as mpirun numbers them
// and fills hosts with them) hold what, and --placement auto's choice between the two layouts by the
// bytes a step sends between hosts. The trainer's comm_grid and the cluster model both use it.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// stages first: a replica's pipeline on consecutive ranks, launch rank d P + s (a host holds
// pipelines, or consecutive stages of one); replicas first: a stage's replicas on consecutive ranks,
// launch rank s D + d (a host holds replicas of a stage, or of consecutive stages)
typedef enum { PLACE_REPLICAS_FIRST, PLACE_STAGES_FIRST } Placement;

int placement_rank(Placement pl, int P, int D, int s, int d);               // launch rank of stage s, replica d
void placement_coords(Placement pl, int P, int D, int rank, int* s, int* d); // the inverse
const char* placement_name(Placement pl);                                   // "stages" or "replicas"

// What a step sends, for one replica's pipeline and one stage's replicas (any one unit: bytes)
typedef struct {
    int P, D;
    const int* host;        // (P*D) the host of each launch rank (equal ids: the same host)
    double msg_bytes;       // between stages s and s + 1 of a replica, both directions together
    double tied_bytes;      // between a replica's first and last stage (the tied embedding's shares)
    const double* dp_bytes; // (P) from each replica of stage s to each other replica of it (the average)
} PlacementTraffic;

// the bytes a step sends between ranks on different hosts under pl
double placement_cross_bytes(Placement pl, const PlacementTraffic* t);
// --placement auto: the layout with fewer bytes between hosts; stages first on a tie (one host: always).
// cross (2, or NULL): each layout's bytes, indexed by the enum
Placement placement_choose(const PlacementTraffic* t, double* cross);
// "stages" | "replicas" | "auto" (*is_auto = 1, *pl untouched); 0, or -1 for anything else
int placement_parse(const char* text, Placement* pl, int* is_auto);

#ifdef __cplusplus
}
#endif
