-- The uids a resource's ownerReferences name, as a jsonb array of strings, so the cascade of a
-- delete finds the dependents of many owners in one indexed query (`owner_uids ?| array[...]`)
-- instead of one containment query per owner.
alter table resources add column owner_uids jsonb generated always as (jsonb_path_query_array(owner_references, '$[*].uid')) stored;
create index resources_owner_uids on resources using gin (owner_uids);
