//! One file per page. Forms post to the HTTP API or to server functions,
//! so they work before hydration.

pub mod account;
pub mod agents;
pub mod consent;
pub mod grants;
pub mod history;
pub mod home;
pub mod inbox;
pub mod not_found;
pub mod notify_admin;
pub mod policies;
pub mod profiles;
pub mod resume;
pub mod set_password;
pub mod setup;
pub mod sign_in;
pub mod tools;
pub mod upstream_admin;
pub mod upstreams;
pub mod users;
