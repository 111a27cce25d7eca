//! Images: references now; the registry client, layer unpacking and the content store come
//! with the images issue.

pub mod reference;
