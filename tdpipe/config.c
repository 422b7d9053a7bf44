// The YAML config file (--config), parsed with libyaml: a mapping of sections (pipeline, model,
// optimizer, data, checkpoint, logging) of scalar keys, each applied through args_set.
#include <stdio.h>
#include <string.h>
#include <yaml.h>
#include "config.h"

int config_load_yaml(TrainArgs* a, const char* path, char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open config file", path);
        return -1;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    int rc = -1;
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s:%zu: YAML error: %s", path, parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
        yaml_parser_delete(&parser);
        fclose(f);
        return -1;
    }
    yaml_node_t* root = yaml_document_get_root_node(&doc);
    if (!root) { // an empty file sets nothing
        rc = 0;
        goto done;
    }
    if (root->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen, "%s:%zu: the top level must be a mapping of sections", path, root->start_mark.line + 1);
        goto done;
    }
    for (yaml_node_pair_t* sp = root->data.mapping.pairs.start; sp < root->data.mapping.pairs.top; sp++) {
        yaml_node_t* sk = yaml_document_get_node(&doc, sp->key);
        yaml_node_t* sv = yaml_document_get_node(&doc, sp->value);
        if (sk->type != YAML_SCALAR_NODE || sv->type != YAML_MAPPING_NODE) {
            snprintf(err, errlen, "%s:%zu: each top-level key must name a section holding a mapping", path, sk->start_mark.line + 1);
            goto done;
        }
        for (yaml_node_pair_t* kp = sv->data.mapping.pairs.start; kp < sv->data.mapping.pairs.top; kp++) {
            yaml_node_t* k = yaml_document_get_node(&doc, kp->key);
            yaml_node_t* v = yaml_document_get_node(&doc, kp->value);
            if (k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE) {
                snprintf(err, errlen, "%s:%zu: '%s' must map keys to plain values", path, k->start_mark.line + 1, (char*)sk->data.scalar.value);
                goto done;
            }
            char key[256], msg[512];
            snprintf(key, sizeof(key), "%s.%s", (char*)sk->data.scalar.value, (char*)k->data.scalar.value);
            if (args_set(a, key, (char*)v->data.scalar.value, msg, sizeof(msg))) {
                snprintf(err, errlen, "%s:%zu: %s", path, k->start_mark.line + 1, msg);
                goto done;
            }
        }
    }
    rc = 0;
done:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}
