import GraphQL

/// The AeroGear DataSync showcase ("Voyager") task schema, executed in-process over EmbeddedTaskRepository:
/// what Foyer serves when no upstream GraphQL server is configured.
enum EmbeddedTaskSchema {
    static let statuses = ["OPEN", "ASSIGNED", "COMPLETE"]

    static func make(store: EmbeddedTaskRepository, events: TaskEvents, changes: TaskChanges) throws -> GraphQLSchema {
        /// Runs inside the mutation: its author is the user it runs for, when Foyer's mutations are observed.
        @Sendable func changed(_ kind: TaskChange.Kind, _ task: TaskRecord) {
            changes.publish(TaskChange(kind: kind, task: task.item, author: TaskAuthors.current, origin: .embedded))
        }
        let status = try GraphQLEnumType(
            name: "TaskStatus",
            values: GraphQLEnumValueMap(uniqueKeysWithValues: statuses.map { ($0, GraphQLEnumValue(value: .string($0))) })
        )
        let task = try GraphQLObjectType(
            name: "Task",
            fields: [
                "id": GraphQLField(type: GraphQLNonNull(GraphQLID)) { source, _, _, _ in (source as? TaskRecord)?.id.map(String.init) },
                "version": GraphQLField(type: GraphQLInt),
                "title": GraphQLField(type: GraphQLNonNull(GraphQLString)),
                "description": GraphQLField(type: GraphQLNonNull(GraphQLString)),
                "status": GraphQLField(type: status),
            ]
        )
        let query = try GraphQLObjectType(
            name: "Query",
            fields: [
                "allTasks": GraphQLField(
                    type: GraphQLList(task),
                    args: ["first": GraphQLArgument(type: GraphQLInt), "after": GraphQLArgument(type: GraphQLString)],
                    resolve: { _, args, _, _ in
                        let first = args["first"].int
                        if let first, first < 0 { throw GraphQLError(message: "first must not be negative") }
                        let after = try offset(args["after"].string)
                        return try await store.all(first: first, after: after)
                    }
                ),
                "getTask": GraphQLField(
                    type: task,
                    args: ["id": GraphQLArgument(type: GraphQLNonNull(GraphQLID))],
                    resolve: { _, args, _, _ in
                        guard let id = Int64(args["id"].string ?? "") else { return nil }
                        return try await store.find(id: id)
                    }
                ),
            ]
        )
        let mutation = try GraphQLObjectType(
            name: "Mutation",
            fields: [
                "createTask": GraphQLField(
                    type: task,
                    args: [
                        "title": GraphQLArgument(type: GraphQLNonNull(GraphQLString)),
                        "description": GraphQLArgument(type: GraphQLNonNull(GraphQLString)),
                        "status": GraphQLArgument(type: status),
                    ],
                    resolve: { _, args, _, _ in
                        let task = try await store.create(
                            title: args["title"].string ?? "", description: args["description"].string ?? "",
                            status: args["status"].string ?? "OPEN"
                        )
                        changed(.added, task)
                        return task
                    }
                ),
                "updateTask": GraphQLField(
                    type: task,
                    args: [
                        "id": GraphQLArgument(type: GraphQLNonNull(GraphQLID)),
                        "title": GraphQLArgument(type: GraphQLString),
                        "description": GraphQLArgument(type: GraphQLString),
                        "version": GraphQLArgument(type: GraphQLNonNull(GraphQLInt)),
                        "status": GraphQLArgument(type: status),
                    ],
                    resolve: { _, args, _, info in
                        guard let id = Int64(args["id"].string ?? "") else { return nil }
                        do {
                            let task = try await store.update(
                                id: id, version: args["version"].int ?? 0, title: args["title"].string,
                                description: args["description"].string, status: args["status"].string
                            )
                            if let task { changed(.updated, task) }
                            return task
                        } catch let conflict as TaskVersionConflict {
                            throw offixConflict(server: conflict.serverState, client: args, info: info)
                        }
                    }
                ),
                "deleteTask": GraphQLField(
                    type: GraphQLID,
                    args: ["id": GraphQLArgument(type: GraphQLNonNull(GraphQLID))],
                    resolve: { _, args, _, _ in
                        guard let raw = args["id"].string, let id = Int64(raw), let task = try await store.delete(id: id) else { return nil }
                        changed(.deleted, task)
                        return raw
                    }
                ),
            ]
        )
        // Each event is the root value its subscription field is resolved on: the field's value is the event itself.
        let subscription = try GraphQLObjectType(
            name: "Subscription",
            fields: GraphQLFieldMap(
                uniqueKeysWithValues: TaskChange.Kind.allCases.map { kind in
                    (kind.rawValue, GraphQLField(type: task, resolve: { source, _, _, _ in source }, subscribe: { _, _, _, _ in events.stream(of: kind) }))
                }
            )
        )
        return try GraphQLSchema(query: query, mutation: mutation, subscription: subscription)
    }

    /// `after` is an offset written as a string ("20"); absent means from the start.
    static func offset(_ after: String?) throws -> Int {
        guard let after else { return 0 }
        guard let offset = Int(after), offset >= 0 else {
            throw GraphQLError(message: "after must be a numeric offset, got \"\(after)\"")
        }
        return offset
    }

    /// The error Offix clients recognise: message `OffixConflict`, both states under `extensions.exception.conflictInfo`.
    static func offixConflict(server: TaskRecord, client: Map, info: GraphQLResolveInfo) -> GraphQLError {
        let serverState: Map = [
            "id": .string(String(server.id ?? 0)), "version": .number(Number(server.version)), "title": .string(server.title),
            "description": .string(server.description), "status": .string(server.status),
        ]
        return GraphQLError(
            message: "OffixConflict",
            nodes: info.fieldASTs,
            path: info.path,
            extensions: ["exception": ["conflictInfo": ["serverState": serverState, "clientState": client]]]
        )
    }
}
